/* The dptrain subcommands; each returns the process exit status: 0 ok, 1 a failure once
 * its work began, 2 the command line (a flag, a value, a file it names) refused before
 * that, 130 train interrupted; the rule is in README.md, "Exit status". argv[0] is the
 * command name ("train", "account", ...). */
#ifndef DPT_CLI_COMMANDS_H
#define DPT_CLI_COMMANDS_H
int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);
int dpt_cmd_predict(int argc, char **argv);
int dpt_cmd_account(int argc, char **argv);
int dpt_cmd_audit(int argc, char **argv);
int dpt_cmd_model(int argc, char **argv);
int dpt_cmd_account_kl(int argc, char **argv); /* account --kl-bound */
#endif
