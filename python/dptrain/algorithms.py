"""The training algorithms of dptrain.train and their options, one frozen dataclass each:

    dptrain.train(x, y, algorithm=dptrain.DPSGD(target_epsilon=3.0, clip=1.0), epochs=5)

Each class holds the options of one algorithm (the CLI's per-algorithm flags of `dptrain
train`, underscores for dashes, with the CLI's defaults); a name string ("sgd", "dpsgd",
...) is the class with its defaults. An option left at None is "not given": the algorithm's
rule applies (e.g. DPSGD needs sigma or target_epsilon). The values are checked when
train() runs, with the messages of the flat keywords they replace.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple, Type, Union

__all__ = ["Algorithm", "SGD", "DPSGD", "PDPSGD", "ProportionalNoise", "DPULR", "ULR", "DPMAC", "MAC", "NoisyGD",
           "ALGORITHM_CLASSES"]


class Algorithm:
    """Base of the algorithm configurations; `name` is the algorithm's name in dptrain.train
    and `dptrain train --algo`."""
    name: ClassVar[str] = ""
    private: ClassVar[bool] = False

    def options(self) -> Dict[str, Any]:
        """The options as the flat keywords of train() (None: not given)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class SGD(Algorithm):
    """Non-private minibatch training (the optimizer of train(), shuffled batches)."""
    name: ClassVar[str] = "sgd"


@dataclass(frozen=True)
class DPSGD(Algorithm):
    """DP-SGD (Abadi et al. 2016): Poisson batches of rate q = batch_size / n, every
    example's gradient clipped to L2 norm `clip`, Gaussian noise of std sigma * clip.

    sigma: the noise multiplier; or None with target_epsilon: calibrated for train's
    `epochs`. target_epsilon with sigma: a budget, the run stops before exceeding it.
    clip_mode: "flat" or "per-layer" (layer l clipped to clip / sqrt(layers)).
    delta: of epsilon, < 1/n unless force=True. secure: OS-seeded streams and the exact
    discrete Gaussian mechanism. allow_ledger_mismatch: resume over a ledger that does not
    match the checkpoint (its steps are then not covered).
    adaptive_quantile: adaptive clipping (Andrew et al. 2021; docs/dpsgd.md): the clip starts
    at `clip` and follows this quantile of the per-example gradient norms (0.5: the median),
    estimated from a noisy count of unclipped examples (noise std adaptive_sigma_b, default
    the expected batch / 20) released with the gradient; C <- C exp(-adaptive_lr (unclipped
    fraction - quantile)). sigma stays the step's total multiplier (one SGM event per step);
    the gradient's is (sigma^-2 - (2 sigma_b)^-2)^-1/2. None: a fixed clip. Run.clip is the
    final clip; the clip after each epoch is in out_dir/metrics.jsonl ("clip").
    feature_norm_sigma, feature_norm_clip: DP feature normalization (Tramer & Boneh 2021's
    frozen BatchNorm on ScatterNet features; docs/nn.md): the model's fbn layer (frozen:
    train(freeze="fbn1")) is set from DP per-channel means and variances of its input over
    the training set, each example's vector of channel means clipped to feature_norm_clip
    (a number, or (C, C2) with C2 for the channel mean squares), two Gaussian releases of
    noise multiplier feature_norm_sigma in the ledger, the epsilon and the calibration; a
    resumed run keeps the checkpoint's statistics. None: off."""
    name: ClassVar[str] = "dpsgd"
    private: ClassVar[bool] = True
    sigma: Optional[float] = None
    clip: float = 1.0
    clip_mode: str = "flat"
    target_epsilon: Optional[float] = None
    delta: float = 1e-5
    secure: bool = False
    force: bool = False
    allow_ledger_mismatch: bool = False
    adaptive_quantile: Optional[float] = None
    adaptive_lr: float = 0.2
    adaptive_sigma_b: Optional[float] = None
    feature_norm_sigma: Optional[float] = None
    feature_norm_clip: Optional[Union[float, Tuple[float, float]]] = None


@dataclass(frozen=True)
class PDPSGD(Algorithm):
    """The proportional "DP regularizer" (pdp-sgd; docs/pdpsgd.md): mean loss + kappa sum
    W_jk^2 mean_n(x_nk^2) + lambda_ sum theta^2, no noise. kappa given, or pdp_sigma: kappa_t =
    (eta_t pdp_sigma)^2 each step (the paper's form for plain SGD; with Adam or momentum our
    mapping of its lr, with a warning). Give at most one (neither: kappa 0). No formal DP
    guarantee, no epsilon."""
    name: ClassVar[str] = "pdp-sgd"
    kappa: Optional[float] = None
    pdp_sigma: Optional[float] = None
    lambda_: float = 0.0


@dataclass(frozen=True)
class ProportionalNoise(Algorithm):
    """SGD with noise proportional to the gradient (proportional-noise): prop_sigma, the
    relative noise std (> 0). Not differentially private."""
    name: ClassVar[str] = "proportional-noise"
    prop_sigma: float


@dataclass(frozen=True)
class DPULR(Algorithm):
    """DP-ULR (docs/dpulr.md): zeroth-order gradient estimates from `copies` perturbations
    of std ulr_std (explicit: 0.1 when None), clipped per module to clip / sqrt(modules),
    with noise multiplier sigma0. ulr_noise: "explicit" (the default; the standard
    analysis) or "controller" (the paper's Eq. 7). min_batch: N_B of the rejection sampler
    (None: the smallest whose cost is below 0.001 of the SGM term). train's sampler:
    "poisson-reject" (accounted, the default) or "shuffle" (the paper's, NOT accounted).
    baseline: None = on, except with the controller."""
    name: ClassVar[str] = "dpulr"
    private: ClassVar[bool] = True
    sigma0: float
    clip: float = 1.0
    target_epsilon: Optional[float] = None
    delta: float = 1e-5
    force: bool = False
    allow_ledger_mismatch: bool = False
    min_batch: Optional[int] = None
    ulr_noise: str = "explicit"
    copies: int = 32
    ulr_std: Optional[float] = None
    modules: str = "auto"
    antithetic: bool = False
    baseline: Optional[bool] = None


@dataclass(frozen=True)
class ULR(Algorithm):
    """The non-private ULR estimator (DP-ULR without clipping and noise)."""
    name: ClassVar[str] = "ulr"
    copies: int = 32
    ulr_std: Optional[float] = None
    modules: str = "auto"
    antithetic: bool = False
    baseline: Optional[bool] = None


@dataclass(frozen=True)
class DPMAC(Algorithm):
    """DP-MAC (docs/dpmac.md): method of auxiliary coordinates, z_steps steps of rate z_lr
    per batch, every layer's coefficient clipped to Theta = clip, noise multiplier sigma (or
    calibrated from target_epsilon). DP-PCA of the inputs to pca_dims dimensions with noise
    std pca_sigma first (0: none), after an optional DP mean centring (center_clip,
    center_sigma); both releases go into the ledger."""
    name: ClassVar[str] = "dpmac"
    private: ClassVar[bool] = True
    sigma: Optional[float] = None
    clip: float = 1.0
    target_epsilon: Optional[float] = None
    delta: float = 1e-5
    secure: bool = False
    force: bool = False
    allow_ledger_mismatch: bool = False
    z_steps: int = 30
    z_lr: float = 0.003
    pca_dims: int = 0
    pca_sigma: Optional[float] = None
    center_clip: Optional[float] = None
    center_sigma: Optional[float] = None


@dataclass(frozen=True)
class MAC(Algorithm):
    """The non-private method of auxiliary coordinates."""
    name: ClassVar[str] = "mac"
    z_steps: int = 30
    z_lr: float = 0.003


@dataclass(frozen=True)
class NoisyGD(Algorithm):
    """Full-batch noisy gradient descent (Langevin; docs/noisy_gd.md) with step size eta and
    noise scale langevin_sigma, and its KL estimate for the `neighbours` ("all", "none" or
    some of remove, add, replace), kl_constant "exact" or "paper"."""
    name: ClassVar[str] = "noisy-gd"
    langevin_sigma: float
    eta: float = 0.01
    linearized: bool = False
    neighbours: Union[str, Sequence[str]] = "all"
    kl_constant: str = "exact"
    replace_candidates: int = 1


ALGORITHM_CLASSES: Dict[str, Type[Algorithm]] = {
    c.name: c for c in (SGD, DPSGD, PDPSGD, ProportionalNoise, DPULR, ULR, DPMAC, MAC, NoisyGD)}


def option_owners(option: str) -> Tuple[str, ...]:
    """The class names whose configuration has `option`."""
    return tuple(c.__name__ for c in ALGORITHM_CLASSES.values() if option in {f.name for f in fields(c)})
