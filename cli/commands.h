/* The dptrain subcommands; each returns the process exit status (0 ok, 1 runtime
 * failure, 2 usage error). argv[0] is the command name ("train", "account", ...). */
#ifndef DPT_CLI_COMMANDS_H
#define DPT_CLI_COMMANDS_H
int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);
int dpt_cmd_account(int argc, char **argv);
int dpt_cmd_audit(int argc, char **argv);
int dpt_cmd_account_kl(int argc, char **argv); /* account --kl-bound */
#endif
