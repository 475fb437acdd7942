"""The compiled program: a ``Learner``'s functions mapped over a leading run axis R,
laid out on a device mesh (``jaxpo.program.parallel``) and jitted.

``Trainer.start`` (``init_runs``, with the chunk built beside it) and ``chunk_runs`` are
what the driver (``jaxpo.run.driver``) calls, chunk after chunk. The program also knows
what only it can: how many programs were compiled, how much memory a run takes, the
metric names, and the abstract batched state a checkpoint restores onto. Two layouts
(``Config.parallel``):

* ``"runs"``: every ``[R, ...]`` leaf of state, hyperparameters and metrics split over
  the D devices along R (R a multiple of D; see ``run_multiple``); no collective in
  the program.
* ``"envs"``: ``shard_map`` over the environments; each device steps E/D of every
  run's environments (the rollout state split along E), parameters, optimiser and
  normaliser state replicated; statistics, loss and metrics averaged over devices.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxpo.core.checks import FieldError, Ref, Setting
from jaxpo.core.rollout import rollout
from jaxpo.core.support import ippo
from jaxpo.program.config import Config, Hyper
from jaxpo.program.learner import Learner, TrainState
from jaxpo.program.parallel import ENV_AXIS, make_mesh

# XLA options of the init program, which runs once per group of runs: built for compile
# time, not speed (``init_compiler_options``).
INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
CPU_INIT_COMPILER_OPTIONS = {**INIT_COMPILER_OPTIONS, "xla_cpu_use_fusion_emitters": False}


# jaxpo's XLA options on CPU, each explained in ``compiler_options``.
CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1, "xla_cpu_experimental_ynn_fusion_type": ""}


def compiler_options(platform: str) -> dict[str, Any] | None:
    """XLA options of jaxpo's top-level programs on ``platform``: the chunk, the PBT step,
    evaluation (``jaxpo.run.evaluate.episode_player``) and rendering. jax refuses options
    on a nested jit, so ``play_episodes``, which others call inside theirs, has none of its own.

    On CPU (``CPU_COMPILER_OPTIONS``; the measurements are in ``docs/speed.md`` and
    ``benchmarks/results/throughput/``):

    * LLVM runs at -O1 instead of XLA's default -O3, which fully unrolls and vectorises
      every small elementwise loop (a threefry round over a [runs, envs, agents, actions]
      tensor, say) at a large cost in compile time and none in speed; values agree with
      -O3 to float32 rounding.
    * No YNNPACK fusions: XLA's own loops compute every reduction and Eigen every
      matrix product. By default XLA hands small reductions (an environment's sums over
      units) and dots to YNNPACK, whose per-call overhead dwarfs their work.

    An option this jaxlib's XLA does not know (the YNNPACK one is experimental) or that
    ``XLA_FLAGS`` sets is left out: XLA's default, or the user's choice, then holds.
    Other platforms keep XLA's defaults.

    Args:
        platform: a device's ``platform`` ("cpu", "gpu", "tpu").

    Returns:
        ``jax.jit``'s ``compiler_options``, or None for XLA's defaults.
    """
    return _known_cpu_options(tuple(CPU_COMPILER_OPTIONS.items())) if platform == "cpu" else None


def init_compiler_options(platform: str) -> dict[str, Any]:
    """XLA options of the init program on ``platform``, which runs once per group of runs
    and is built for compile time (the figures are in ``docs/speed.md``):

    * no backend optimisation (``INIT_COMPILER_OPTIONS``), on every platform;
    * on CPU, XLA:CPU's older loop emitters for its fusions instead of its MLIR fusion
      emitters (``CPU_INIT_COMPILER_OPTIONS``): shorter to compile, to the same values bit
      for bit in the shipped configs.

    On CPU, an option ``XLA_FLAGS`` names or this jaxlib's XLA does not know is left out,
    as ``compiler_options`` does.

    Args:
        platform: a device's ``platform`` ("cpu", "gpu", "tpu").

    Returns:
        ``jax.jit``'s ``compiler_options`` for the init program.
    """
    if platform != "cpu":
        return dict(INIT_COMPILER_OPTIONS)
    return _known_cpu_options(tuple(CPU_INIT_COMPILER_OPTIONS.items()))


@functools.cache
def _known_cpu_options(wanted: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The options ``wanted`` less those ``XLA_FLAGS`` names or XLA refuses (tried on a
    one-element program, once per process)."""
    flags = os.environ.get("XLA_FLAGS", "")
    probe = jax.ShapeDtypeStruct((), np.float32, sharding=SingleDeviceSharding(jax.local_devices(backend="cpu")[0]))
    options = {}
    for name, value in wanted:
        if name in flags:
            continue
        try:
            jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(probe).compile()
        except jax.errors.JaxRuntimeError:
            continue
        options[name] = value
    return options


def check_lr_horizon(config: Config, lr_horizon: Any) -> None:
    """Refuses runs that would anneal their learning rate over no updates.

    With ``Config.anneal_lr`` the rate is ``lr · max(0, 1 − update / lr_horizon)``; an
    ``lr_horizon`` of 0 means the run's own length, which only the caller knows
    (``Hyper.with_horizon``, as ``jaxpo.train`` and sweeps resolve it). Left at 0, the
    first update's rate is 0 / 0 and every parameter NaN from then on.

    Args:
        config: the program's static configuration.
        lr_horizon: the runs' ``Hyper.lr_horizon`` ``[R]``: host values, or a global array
            of which this process checks its own shards (every process holds the same
            values, so none waits on another).

    Raises:
        ValueError: ``config.anneal_lr`` and a run's ``lr_horizon`` is not positive.
    """
    shards = lr_horizon.addressable_shards if isinstance(lr_horizon, jax.Array) else ()
    values = [np.asarray(s.data) for s in shards] or [np.asarray(lr_horizon)]
    if config.anneal_lr and not all(np.all(v > 0) for v in values):
        raise ValueError("Config.anneal_lr needs each run's Hyper.lr_horizon > 0 (the updates it anneals over): "
                         "use hyper.with_horizon(num_updates), as jaxpo.train and sweeps do")


def over_runs(fn: Callable) -> Callable:
    """``fn`` of one run, mapped over the leading run axis R of its arguments and outputs.

    Where the arguments hold one run (a lone run, or one per device in the ``"runs"``
    layout), ``fn`` is called on it directly, the axis taken off and put back: the same
    computation, traced without ``vmap``'s batching pass over everything ``fn`` traces
    (``docs/speed.md``, "Startup"). Otherwise ``jax.vmap(fn)``.

    Args:
        fn: one run's function (``Learner.init``, ``Learner.chunk``).

    Returns:
        A function of leaves ``[R, ...]`` returning leaves ``[R, ...]``.
    """
    batched = jax.vmap(fn)

    def mapped(*args):
        if {np.shape(x)[0] for x in jax.tree.leaves(args)} != {1}:
            return batched(*args)
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    return mapped


class Trainer:
    """The compiled training program for one static ``Config`` on ``devices``.

    Get one with ``jaxpo.trainer(config)``, which caches it: every run of a config shares
    its compiled programs. The learner's data (``config``, ``axis``, ``env``, ``net``,
    ``num_agents``) and its one-run functions (``init``, ``step``, ``chunk``, ``collect``,
    ``update``, ``training_data``, ``advantages``, ``log_probs``, ``flat_time_major``) are
    the Trainer's properties too (``tr.step`` is ``tr.learner.step``); the rest of the
    ``Learner`` is ``tr.learner``. R, the number of runs of a call, is a multiple of
    ``run_multiple``; K is ``config.updates_per_chunk``.

    Args:
        config: the static configuration the program is built for.
        devices: the devices it runs on (default: all of every process).
        xla_defaults: compile the top-level programs, init included, with XLA's default
            options instead of jaxpo's for the platform (``compiler_options``,
            ``init_compiler_options``), e.g. to measure against a peer at XLA's defaults.

    Raises:
        ValueError: if ``devices`` are not distinct jax devices, or with ``parallel``
            "envs" if ``num_envs`` is not a multiple of the devices or ``num_minibatches``
            does not divide each device's samples per update; or what ``Config.make_env``
            and ``Config.cnn_layers`` raise.

    Attributes:
        learner: the pure functions (``jaxpo.program.learner.Learner``).
        mesh: the 1-D device mesh.
        num_devices: D, the mesh's size.
        state_sharding: the batched ``TrainState``'s layout (one sharding or a tree of them).
        run_sharding: the layout of per-run inputs and metrics ``[R, ...]``.
        init_runs: jitted ``init_runs(keys [R, 2], hyper [R]) -> state [R, ...]``.
        chunk_runs: jitted ``chunk_runs(state, hyper) -> (state, metrics)``, each metric
            ``[R, K]``; it donates ``state``.
        compiles: ``{"init": n, "chunk": n}``, the programs built so far.
        compiler_options: the XLA options of its top-level programs on its devices
            (``compiler_options``), for the programs built around it too (PBT's step).
    """

    def __init__(self, config: Config, devices: tuple[jax.Device, ...] | None = None, xla_defaults: bool = False):
        self.mesh = make_mesh(config.parallel, devices)
        self.num_devices = self.mesh.size
        if config.parallel == "envs":
            _check_env_split(config, self.num_devices)
        platform = self.mesh.devices.flat[0].platform  # whose kernels and XLA options the programs use
        self.learner = Learner(config, ENV_AXIS if config.parallel == "envs" else None, platform)
        # Counts of programs built (a trace happens exactly once per compiled signature).
        self.compiles = {"init": 0, "chunk": 0}
        self.state_sharding, self.run_sharding, self._chunk_program = self._layout()
        self.compiler_options = None if xla_defaults else compiler_options(platform)
        self.init_runs = jax.jit(self._counted("init", over_runs(self.learner.init)),
                                 in_shardings=self.run_sharding, out_shardings=self.state_sharding,
                                 compiler_options=None if xla_defaults else init_compiler_options(platform))
        self.chunk_runs = jax.jit(self._counted("chunk", self._chunk_program), donate_argnums=0,
                                  in_shardings=(self.state_sharding, self.run_sharding),
                                  out_shardings=(self.state_sharding, self.run_sharding),
                                  compiler_options=self.compiler_options)

    # The learner's names, answered for it (the rest of the Learner is ``tr.learner``).
    @property
    def config(self) -> Config:
        """``self.learner.config``: the static configuration the program is built for."""
        return self.learner.config

    @property
    def axis(self) -> str | None:
        """``self.learner.axis``: the mesh axis the environments are split over (``parallel='envs'``), else None."""
        return self.learner.axis

    @property
    def env(self) -> Any:
        """``self.learner.env``: the auto-resetting environment (``jaxpo.envs.AutoReset``)."""
        return self.learner.env

    @property
    def net(self) -> Any:
        """``self.learner.net``: the actor-critic (``jaxpo.core.networks.ActorCritic``)."""
        return self.learner.net

    @property
    def num_agents(self) -> int:
        """``self.learner.num_agents``: n, the environment's agents."""
        return self.learner.num_agents

    @property
    def init(self) -> Callable:
        """``self.learner.init``: ``Learner.init``: one run's initial ``TrainState``."""
        return self.learner.init

    @property
    def step(self) -> Callable:
        """``self.learner.step``: ``Learner.step``: one run's train step."""
        return self.learner.step

    @property
    def chunk(self) -> Callable:
        """``self.learner.chunk``: ``Learner.chunk``: K train steps of one run."""
        return self.learner.chunk

    @property
    def collect(self) -> Callable:
        """``self.learner.collect``: ``Learner.collect``: one run's rollout and training data."""
        return self.learner.collect

    @property
    def update(self) -> Callable:
        """``self.learner.update``: ``Learner.update``: one run's epochs over its training data."""
        return self.learner.update

    @property
    def training_data(self) -> Callable:
        """``self.learner.training_data``: ``Learner.training_data``: a rollout's samples for the update."""
        return self.learner.training_data

    @property
    def advantages(self) -> Callable:
        """``self.learner.advantages``: ``Learner.advantages``: per-agent GAE, aggregated and normalised."""
        return self.learner.advantages

    @property
    def log_probs(self) -> Callable:
        """``self.learner.log_probs``: ``Learner.log_probs``: the policy's log-probabilities of taken actions."""
        return self.learner.log_probs

    @property
    def flat_time_major(self) -> Callable:
        """``self.learner.flat_time_major``: ``Learner.flat_time_major``: time-major samples flattened."""
        return self.learner.flat_time_major

    @property
    def run_multiple(self) -> int:
        """The multiple of runs a group must have: D when the runs are split over the devices, else 1."""
        return self.num_devices if self.config.parallel == "runs" else 1

    def _layout(self) -> tuple[Any, NamedSharding, Any]:
        """``(state sharding, sharding of per-run inputs and metrics, batched chunk)``."""
        chunk = over_runs(self.learner.chunk)
        if self.config.parallel == "runs":
            # Mapped per device, not only sharded: a data-dependent loop (the rollout's
            # bootstrap blocks) then stops on each device's own runs, where a sharded
            # vmap would all-reduce its condition over the devices at every iteration.
            runs_split = NamedSharding(self.mesh, P("runs"))
            # check_vma off: runs share nothing, and an env's constant outputs (a
            # never-truncating env's `truncated`) would otherwise differ in type from
            # the per-run carry they enter.
            mapped = jax.shard_map(chunk, mesh=self.mesh, in_specs=P("runs"), out_specs=P("runs"), check_vma=False)
            return runs_split, runs_split, mapped
        replicated = NamedSharding(self.mesh, P())
        # Data parallel: the rollout state [R, E, ...] split along E; the rest replicated.
        spec = TrainState(params=P(), opt_state=P(), rollout=P(None, ENV_AXIS),
                          value_norm=P() if self.config.value_norm else None, key=P(), update=P())
        mapped = jax.shard_map(chunk, mesh=self.mesh, in_specs=(spec, P()), out_specs=(spec, P()))
        return jax.tree.map(lambda p: NamedSharding(self.mesh, p), spec), replicated, mapped

    def _counted(self, name: str, fn):
        def traced(*args):
            self.compiles[name] += 1  # runs at trace time only
            return fn(*args)

        traced.__name__ = traced.__qualname__ = name  # jax's compile logs and events name the program
        return traced

    @functools.cached_property
    def _default_hyper(self) -> Hyper:
        """One dense run's ``Hyper`` (IPPO's supports): the layout traced when none is given."""
        return Hyper.create(ippo(self.num_agents))

    @functools.cached_property
    def _abstract_run(self) -> TrainState:
        """Shapes of one run's ``TrainState``, by tracing only."""
        return jax.eval_shape(self.learner.init, jax.random.PRNGKey(0), self._default_hyper)

    def _abstract_hyper(self, size: int, hyper: Hyper | None = None) -> Hyper:
        """``hyper``'s layout (leaves ``[R, ...]``, any R; default one dense run's) for
        ``size`` runs, placed as the driver puts them: ``jax.ShapeDtypeStruct`` leaves."""
        # A layout needs no trace of init: abstract_state traces it once, vmapped.
        per_run = self._default_hyper if hyper is None else jax.tree.map(lambda x: x[0], hyper)
        dtype = lambda x: jax.dtypes.canonicalize_dtype(np.asarray(x).dtype)  # as put on a device
        placed = lambda x: jax.ShapeDtypeStruct((size, *np.shape(x)), dtype(x), sharding=self.run_sharding)
        return jax.tree.map(placed, per_run)

    def metric_names(self, size: int | None = None, hyper: Hyper | None = None) -> tuple[str, ...]:
        """The names of the per-update metrics ``step`` returns (sorted), by tracing the
        chunk program, not running it.

        The trace is the program's own: a group of ``size`` runs of ``hyper``'s layout
        then runs without tracing the chunk again (a run's CSV header costs no trace).

        Args:
            size: R, the runs of the group it traces (default ``run_multiple``).
            hyper: the runs' traced values (leaves ``[R, ...]``; default dense supports).

        Returns:
            The metric names, sorted.
        """
        size = size or self.run_multiple
        traced = self.chunk_runs.trace(self.abstract_state(size), self._abstract_hyper(size, hyper))
        return tuple(sorted(traced.out_info[1]))

    def abstract_state(self, size: int) -> Any:
        """The batched ``TrainState`` of ``size`` runs, by tracing only: the target of a restore.

        Args:
            size: the number of runs R, padding included (a multiple of ``run_multiple``).

        Returns:
            A ``TrainState`` of ``jax.ShapeDtypeStruct`` leaves ``[size, ...]`` carrying this
                program's shardings.
        """
        keys = jax.ShapeDtypeStruct((size, 2), jnp.uint32, sharding=self.run_sharding)
        return self._placed(jax.eval_shape(self.init_runs, keys, self._abstract_hyper(size)))

    def _placed(self, shapes: Any) -> Any:
        """The batched state's shapes (leaves with ``shape`` and ``dtype``) as
        ``jax.ShapeDtypeStruct`` leaves carrying ``state_sharding``."""
        # state_sharding is one sharding, or a tree of them that is a prefix of the state's
        place = lambda sharding, part: jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), part)
        if isinstance(self.state_sharding, jax.sharding.Sharding):
            return place(self.state_sharding, shapes)
        return jax.tree.map(place, self.state_sharding, shapes)

    def start(self, keys: jax.Array, hyper: Hyper) -> TrainState:
        """``init_runs(keys, hyper)``, with the chunk program built beside it: what a new
        group of runs calls before its first chunk.

        One after the other, the two builds add up; here the init program's XLA compile
        runs on a worker thread (XLA releases the GIL) while this thread traces and lowers
        the chunk, which is Python and keeps one core. The chunk is built for the layout
        init's lowering gives (``abstract_state``'s), into ``chunk_runs``'s own cache, so
        the first ``chunk_runs(state, hyper)`` compiles nothing.

        Args:
            keys: uint32 ``[R, 2]``, one PRNG key per run, on ``run_sharding``.
            hyper: the runs' ``Hyper`` (leaves ``[R, ...]``) on ``run_sharding``.

        Returns:
            The runs' initial ``TrainState`` ``[R, ...]``, as ``init_runs`` returns it.

        Raises:
            ValueError: ``Config.anneal_lr`` without each run's ``lr_horizon`` (``check_lr_horizon``).
        """
        check_lr_horizon(self.config, hyper.lr_horizon)
        init = self.init_runs.lower(keys, hyper)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxpo-init-compile") as pool:
            built = pool.submit(init.compile)
            self.chunk_runs.lower(self._placed(init.out_info), hyper).compile()
            built.result()
        return self.init_runs(keys, hyper)

    def bytes_per_run(self) -> int:
        """An estimate of one run's peak memory in the chunk program, by tracing only.

        It counts the train state (in, out, and Adam's moments in the gradient step) and
        the rollout with the training data, minibatches and activations made from it.
        Calibrated against measured peaks by ``benchmarks/sweep_scaling.py``.

        Returns:
            Bytes per run: 3 × the ``TrainState``'s plus 6 × one rollout's.
        """
        state = self._abstract_run
        cfg = self.config
        traj = jax.eval_shape(
            lambda s: rollout(self.env, self.net, s.params, s.rollout, s.key, cfg.num_steps, cfg.critic_input)[1], state)
        return 3 * tree_bytes(state) + 6 * tree_bytes(traj)


def trainer(config: Config, devices: Sequence[jax.Device] | None = None) -> Trainer:
    """The (cached) ``Trainer`` for ``config`` on ``devices``.

    Every run with this static config, of any length, in any sweep, shares it and its
    compiled programs.

    Args:
        config: the static configuration.
        devices: the devices to run on (default: every device of every process).

    Returns:
        The ``Trainer``; the same object for an equal ``config`` and ``devices``.

    Raises:
        ValueError: if ``config`` is not a ``jaxpo.Config``, or what ``Trainer`` raises.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a jaxpo.Config, got {type(config).__name__}")
    return _trainer(config, tuple(jax.devices() if devices is None else devices))


@functools.lru_cache(maxsize=16)
def _trainer(config: Config, devices: tuple[jax.Device, ...]) -> Trainer:
    return Trainer(config, devices)


def _check_env_split(config: Config, num_devices: int) -> None:
    """Data parallel needs equal shares: E and each device's minibatches divide evenly."""
    if config.num_envs % num_devices:
        raise FieldError.saying("config.num_envs", Setting("config.parallel", "envs", "Config.parallel"),
                                f" splits num_envs ({config.num_envs}) over {num_devices} devices: ",
                                Ref("config.num_envs", "num_envs"), f" must be a multiple of {num_devices}")
    if (config.num_sequences // num_devices) % config.num_minibatches:
        raise FieldError.saying("config.num_minibatches", Setting("config.parallel", "envs", "Config.parallel"),
                                ": ", Ref("config.num_minibatches", "num_minibatches"),
                                f" ({config.num_minibatches}) must divide each device's "
                                f"{config.num_sequences // num_devices} training samples per update "
                                f"(num_envs * num_steps / sequence length / {num_devices} devices)")


def tree_bytes(tree: Any) -> int:
    """Bytes of all array leaves of ``tree`` (arrays or ``ShapeDtypeStruct``s)."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))
