"""The LightningCLI of the recipes: trainer defaults said once, a run directory named after the config, and
``fit`` ending by testing the best checkpoint and writing metrics.json."""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from attnmm.lightning.checkpoint import RandomState, find_last_checkpoint


def write_metrics(metrics: dict[str, Any], log_dir: str | Path) -> Path:
    """Write the metrics dict as ``metrics.json`` in ``log_dir`` (atomically) and return its path."""
    path = Path(log_dir) / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {k: float(v) for k, v in sorted(metrics.items())}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(clean, indent=2) + "\n")
    tmp.replace(path)
    return path


def _nested_nulls_as_json(args: list[str], roots: tuple[str, ...]) -> list[str]:
    """Rewrite ``--model.a.init_args.b=null`` as ``--model.a={"init_args": {"b": null}}`` (also the
    ``--key null`` form), for the ``roots`` parsed in subclass mode: jsonargparse (4.53) reads a
    nested ``null`` there as the string ``"None"`` and rejects it, but takes the same value as JSON."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if not eq and i + 1 < len(args) and args[i + 1] == "null" and key.startswith("--"):
            value, i = "null", i + 1
        parts = key[2:].split(".") if key.startswith("--") else []
        if value == "null" and len(parts) >= 3 and parts[0] in roots:
            nested: Any = None
            for part in reversed(parts[2:]):
                nested = {part: nested}
            out.append(f"--{parts[0]}.{parts[1]}={json.dumps(nested)}")
        elif value == "null" and not eq:
            out += [arg, "null"]
        else:
            out.append(arg)
        i += 1
    return out


class Link(NamedTuple):
    """A value written once and derived everywhere else: LightningCLI's ``parser.link_arguments``.

    ``target`` takes the value of ``source`` (or ``compute_fn`` of several sources). With
    ``apply_on="parse"`` both are config keys and the target is filled in when the config is read;
    with ``apply_on="instantiate"`` the source is an attribute of an object built first (the
    DataModule's ``num_classes``), read just before the target's class is built. A target inside a
    class that lacks that argument (a ``head: null``, an LSTM encoder without ``num_heads``) is left
    alone, so one set of links serves configs that swap ``class_path``.

    Examples:
        >>> Link("data.num_classes", "model.num_classes", apply_on="instantiate")
        Link(source='data.num_classes', target='model.num_classes', compute_fn=None, apply_on='instantiate')
    """

    source: str | tuple[str, ...]
    target: str
    compute_fn: Callable[..., Any] | None = None
    apply_on: Literal["parse", "instantiate"] = "parse"

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source

    def value(self, values: Sequence[Any]) -> Any:
        """The target's value from the sources' ``values``."""
        return values[0] if self.compute_fn is None else self.compute_fn(*values)


#: The adapter's token width ``d_model`` is the encoder's and the head's input width.
WIDTH_LINKS = (
    Link("model.adapter.init_args.d_model", "model.encoder.init_args.d_model"),
    Link("model.adapter.init_args.d_model", "model.head.init_args.d_model"),
)
#: The DataModule's ``num_classes`` is the task's and the head's.
CLASS_LINKS = (
    Link("data.num_classes", "model.num_classes", apply_on="instantiate"),
    Link("data.num_classes", "model.head.init_args.num_classes", apply_on="instantiate"),
)


def head_dim(d_model: int, num_heads: int) -> int:
    """The width of one attention head, ``d_model / num_heads`` (a rotary embedding's ``head_dim``)."""
    if d_model % num_heads:
        raise ValueError(f"d_model = {d_model} is not a multiple of num_heads = {num_heads}")
    return d_model // num_heads


#: The encoder's heads: the rotary embedding's ``head_dim`` and the relative position bias's ``num_heads``.
HEAD_LINKS = (
    Link(("model.adapter.init_args.d_model", "model.encoder.init_args.num_heads"),
         "model.encoder.init_args.rotary.init_args.head_dim", compute_fn=head_dim),
    Link("model.encoder.init_args.num_heads", "model.encoder.init_args.position_bias.init_args.num_heads"),
)


def best_checkpoint_name(monitor: str) -> str:
    """The file name of the best checkpoint by ``monitor``: ``best-{epoch}-{<monitor>:.4f}``.

    Examples:
        >>> best_checkpoint_name("val_der")
        'best-{epoch}-{val_der:.4f}'
    """
    return f"best-{{epoch}}-{{{monitor}:.4f}}"


def _class(config: Any, default: Any) -> Any:
    """The class a config node names by ``class_path`` (``default`` when it names none)."""
    path = config.get("class_path") if isinstance(config, dict) else None
    if path is None:
        return default
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name, None)


def _built(value: Any) -> Any:
    """A dumped config value with every ``{"class_path": ..., "init_args": ...}`` node inside it built
    (e.g. a DataModule's ``noise_augment``), as jsonargparse builds them for a run."""
    if isinstance(value, dict) and "class_path" in value:
        return _class(value, None)(**_built(value.get("init_args") or {}))
    if isinstance(value, dict):
        return {k: _built(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_built(v) for v in value]
    return value


def _accepts(config: Any, cls: Any, key: str) -> bool:
    """Whether the dumped config ``config`` (of ``cls``) has a place for the dotted ``key``: each part on
    the way is there (not ``None``) and the last is a parameter of the class that holds it."""
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(config, dict) or config.get(part) is None:
            return False
        config = config[part]
        if part != "init_args":
            cls = _class(config, cls)
    if not isinstance(config, dict) or cls is None:
        return False
    return leaf in inspect.signature(cls).parameters


def _get(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        config = config[part]
    config[leaf] = copy.deepcopy(value)  # (a value of its own: no YAML anchor in a printout)


def _run_name(args: Any, config: str | Path | None) -> str | None:
    """The stem of the last ``--config`` file among ``args`` (the command line when ``None``), else of
    the recipe's default ``config``."""
    argv = list(sys.argv[1:] if args is None else args) if isinstance(args, list | None) else []
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", action="append", default=[])
    configs = pre.parse_known_args(argv)[0].config
    named = [c for c in configs if isinstance(c, str) and c.endswith((".yaml", ".yml", ".json"))]
    if named:
        return Path(named[-1]).stem
    return None if config is None else Path(config).stem


class RecipeCLI(LightningCLI):
    """LightningCLI for the recipes (subcommands fit, validate, test, predict), with the trainer
    defaults that every recipe shares said here once.

    **Trainer defaults** (a config or the command line overrides any of them): the CPU, one device;
    a run directory ``runs/<name>``, where ``<name>`` is the stem of the last ``--config`` file given
    (else of the recipe's default config), holding the TensorBoard logs (``version_N/``: checkpoints,
    ``metrics.json``) and the CSV logs (``csv/version_N/``); checkpoints written atomically
    (:class:`~attnmm.lightning.AtomicCheckpointIO`); ``seed_everything: 0``. Always present: a
    :class:`~attnmm.lightning.RandomState` callback (resuming draws the random numbers an uninterrupted
    run would) and a ``ModelCheckpoint``, configured under the ``checkpoint:`` key (``monitor``,
    default ``val_acc``; ``mode``, default ``max``; the last checkpoint kept; the best named by
    :func:`best_checkpoint_name` unless ``filename`` is given). So a recipe's config holds only what is
    its own, and a variant config only what differs from it.

    It adds ``--torch_threads N`` to every subcommand, which sets PyTorch's intra-op threads before
    anything is built (small models on a busy CPU run far faster on one thread than on threads that
    wait for each other), and ``--test_after_fit`` (fit only, default true): after ``fit`` it tests the
    best checkpoint (the last weights when no checkpoint was written, e.g. under
    ``--trainer.fast_dev_run=true``) and writes the test metrics (``test_acc``, ``test_loss``, ...) as
    ``metrics.json`` in the run's log directory; with ``--test_after_fit false``, for runs that choose
    something on validation, it validates the best checkpoint instead and writes only the validation
    metrics, so that no test number is computed, printed or logged. ``test`` writes them too.

    ``fit --ckpt_path last`` resumes from the newest ``last*.ckpt`` of any earlier run in the run
    directory and goes on checkpointing next to it (Lightning alone looks only in the new run's
    ``version_N`` directory, and would forget the best checkpoint so far). Checkpoints are loaded with
    ``weights_only=True`` unless ``--weights_only=false`` is given.

    In subclass mode (``subclass_mode_model=True`` / ``subclass_mode_data=True``) a config picks the
    task module and the DataModule by ``class_path`` (``--model attnmm.lightning.SequenceTask``,
    ``--data attnmm.data.SpeechCommandsDataModule``); ``default_model`` and ``default_data`` are the
    classes used where no ``class_path`` is given, so a config written for one fixed class (a plain
    ``model:`` block of its arguments) keeps working.

    A recipe is its task module, its DataModule, its default config and its links::

        RecipeCLI(ClassificationTask, MNISTDataModule, config="configs/image_patches.yaml",
                  links=WIDTH_LINKS + CLASS_LINKS)

    ``config`` is the default config file of every subcommand (``--config`` files are applied on top),
    and the config saved in the run directory is overwritten by a new run. ``links`` (:class:`Link`) say
    where a value that several arguments share comes from, so a config writes a width or a class
    count once; their keys are written as for a fixed class (``model.head.init_args.d_model``) and
    get ``init_args`` inserted in subclass mode (``model.init_args.head.init_args.d_model``).
    ``--print_config`` shows the linked values too (jsonargparse's alone leaves them out), those
    read from the DataModule included.
    """

    def __init__(
        self,
        *args: Any,
        default_model: type | None = None,
        default_data: type | None = None,
        config: str | Path | None = None,
        links: Sequence[Link] = (),
        **kwargs: Any,
    ) -> None:
        self._default_classes = {"model": default_model, "data": default_data}
        self._links = tuple(links)
        if config is not None:
            defaults = {"default_config_files": [str(config)]}
            per_command = {cmd: defaults for cmd in self.subcommands()} if kwargs.get("run", True) else defaults
            kwargs.setdefault("parser_kwargs", per_command)
            kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        name = _run_name(kwargs.get("args"), config)
        if name is not None:
            kwargs.setdefault("trainer_defaults", self.recipe_trainer_defaults(f"runs/{name}"))
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("load_from_checkpoint_support", False)  # the hyperparameters are recorded here
        super().__init__(*args, **kwargs)
        # A process group left for interpreter teardown lets gloo's worker threads die inside
        # C++ destructors ("terminate called without an active exception", exit code 134) now
        # and then. Tear it down here, after a clean run only: after an exception the other
        # ranks may still be inside a collective and the teardown could hang.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    @staticmethod
    def recipe_trainer_defaults(run_dir: str) -> dict[str, Any]:
        """The trainer defaults of every recipe, logging under ``run_dir`` (see the class docstring)."""
        loggers = {"TensorBoardLogger": "", "CSVLogger": "csv"}
        return {
            "accelerator": "cpu",
            "devices": 1,
            "default_root_dir": run_dir,
            "logger": [
                {"class_path": f"lightning.pytorch.loggers.{cls}", "init_args": {"save_dir": run_dir, "name": name}}
                for cls, name in loggers.items()
            ],
            "plugins": [{"class_path": "attnmm.lightning.AtomicCheckpointIO"}],  # never a truncated last.ckpt
            "callbacks": [RandomState()],  # persistent: resume draws the same random numbers
        }

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--torch_threads", type=int | None, default=None,
            help="intra-op CPU threads for PyTorch (default: PyTorch's choice, one per core)",
        )
        parser.add_argument(
            "--test_after_fit", type=bool, default=True,
            help="fit only: test the best checkpoint after fitting and write the test metrics; false validates "
                 "it instead and writes the validation metrics (for runs that choose on validation)",
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val_acc", "checkpoint.mode": "max", "checkpoint.save_last": True})
        # subclass mode: the class a config without ``class_path`` gets (its keys are that class's init_args)
        for key, cls in self._default_classes.items():
            if cls is not None:
                parser.set_defaults({key: {"class_path": f"{cls.__module__}.{cls.__qualname__}"}})
        for link in self._links:
            source = tuple(self._subclass_key(s) for s in link.sources)
            parser.link_arguments(
                source[0] if len(source) == 1 else source, self._subclass_key(link.target),
                compute_fn=link.compute_fn, apply_on=link.apply_on,
            )

    def _subclass_key(self, key: str) -> str:
        """``model.x`` as ``model.init_args.x`` when the model is parsed in subclass mode (same for data)."""
        root, dot, rest = key.partition(".")
        if dot and root in self._subclass_roots() and not rest.startswith("init_args."):
            return f"{root}.init_args.{rest}"
        return key

    def _subclass_roots(self) -> tuple[str, ...]:
        return ("model",) * self.subclass_mode_model + ("data",) * self.subclass_mode_data

    def _root_class(self, key: str) -> Any:
        return self.model_class if key.startswith("model.") else self.datamodule_class

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        if self.subclass_mode_model or self.subclass_mode_data:
            args = _nested_nulls_as_json(list(sys.argv[1:] if args is None else args), self._subclass_roots())
        if isinstance(args, list | None):
            args = list(sys.argv[1:] if args is None else args)
            if "--print_config" in args:
                # jsonargparse leaves link targets out of --print_config; show the resolved values
                super().parse_arguments(parser, [a for a in args if a != "--print_config"])
                print(self._resolved_config(), end="")
                sys.exit(0)
        super().parse_arguments(parser, args)

    def _config_dict(self) -> dict[str, Any]:
        """The parsed config of the subcommand as plain data, with the link targets jsonargparse filled."""
        import yaml

        dump = yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False, skip_none=False, format="yaml"))
        command = self.config.get("subcommand")
        return dump[command] if command else dump

    def _resolved(self, data: Any = None) -> dict[str, Any]:
        """The parsed config as plain data with every link target filled in: the parse links' values, and
        the instantiation links' values read from the DataModule ``data`` (built from the config when
        ``None``, as a run would)."""
        config = self._config_dict()
        self._fill_parse_links(config)
        if config.get("checkpoint", {}).get("filename") is None:
            config["checkpoint"]["filename"] = best_checkpoint_name(config["checkpoint"]["monitor"])
        for link in self._links:
            target = self._subclass_key(link.target)
            if link.apply_on != "instantiate" or not _accepts(config, self._root_class(target), target):
                continue
            if data is None:
                data = self._build_data(config.get("data") or {})
            _set(config, target, link.value([getattr(data, s.split(".", 1)[1]) for s in link.sources]))
        return config

    def _resolved_config(self) -> str:
        import yaml

        return yaml.safe_dump(self._resolved(), sort_keys=False)

    def _fill_parse_links(self, config: dict[str, Any]) -> None:
        """Write the values of the parse links into ``config`` (a dumped config), where the target is a
        parameter of the class there and every source is given (as jsonargparse applies them)."""
        for link in self._links:
            if link.apply_on != "parse":
                continue
            values = [_get(config, self._subclass_key(source)) for source in link.sources]
            target = self._subclass_key(link.target)
            if all(v is not None for v in values) and _accepts(config, self._root_class(target), target):
                _set(config, target, link.value(values))

    def _build_data(self, config: dict[str, Any]) -> Any:
        cls = _class(config, self.datamodule_class)
        return cls(**_built(config.get("init_args", {}) if "class_path" in config else config))

    def before_instantiate_classes(self) -> None:
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        threads = config.get("torch_threads")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"--torch_threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if config.get("checkpoint.filename") is None:
            config["checkpoint.filename"] = best_checkpoint_name(config["checkpoint.monitor"])

    def after_instantiate_classes(self) -> None:
        # The model's hyperparameters are its resolved config, every linked value included, in the form
        # Lightning's ``instantiate_module`` rebuilds from: ``load_from_checkpoint(path)`` (and ``test
        # --ckpt_path``) rebuild the model a run trained. (Lightning's own recording is switched off:
        # it fails on a link into a part the chosen class lacks.)
        model = self._resolved(self.datamodule).get("model") or {}
        if not model:  # a model without arguments
            return
        if "class_path" in model:
            model = {"_class_path": model["class_path"], **model.get("init_args", {})}
        self.model.save_hyperparameters({**model, "_instantiator": "lightning.pytorch.cli.instantiate_module"},
                                        logger=False)

    def _weights_only(self) -> None:
        # checkpoints hold tensors and plain values only: load them without unpickling any code
        # (``--weights_only=false`` still opts out, e.g. for a checkpoint of another program)
        config = self.config_init[str(self.subcommand)]
        if config.get("weights_only") is None:
            config["weights_only"] = True

    def before_validate(self) -> None:
        self._weights_only()

    def before_test(self) -> None:
        self._weights_only()

    def before_predict(self) -> None:
        self._weights_only()

    def before_fit(self) -> None:
        self._weights_only()
        config = self.config_init[str(self.subcommand)]
        if config.get("ckpt_path") == "last":
            # Lightning looks for ``last`` only in the new run's version directory
            last = find_last_checkpoint(*self._run_roots())
            if last is not None:
                print(f"resuming from {last}")
                config["ckpt_path"] = str(last)
                # keep checkpointing where the run was, so the best-so-far state is restored too
                for callback in self.trainer.checkpoint_callbacks:
                    if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                        callback.dirpath = str(last.parent)

    def _run_roots(self) -> list[str | Path]:
        trainer = self.trainer
        roots: list[str | Path] = [trainer.default_root_dir]
        roots += [cb.dirpath for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
        roots += [logger.save_dir for logger in trainer.loggers if logger.save_dir]
        return roots

    def after_fit(self) -> None:
        trainer = self.trainer
        ckpt = "best" if trainer.checkpoint_callback is not None and getattr(
            trainer.checkpoint_callback, "best_model_path", ""
        ) else None
        if self.config[str(self.subcommand)].get("test_after_fit", True):
            results = trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt, weights_only=True)
            self._write(results, "test")
        else:
            results = trainer.validate(self.model, datamodule=self.datamodule, ckpt_path=ckpt, weights_only=True)
            self._write(results, "val")

    def after_test(self) -> None:
        self._write([dict(self.trainer.callback_metrics)], "test")

    def _write(self, results: list[dict[str, Any]], prefix: str) -> None:
        # every process asks: under DDP ``log_dir`` is a broadcast from rank 0
        log_dir = self.trainer.log_dir or self.trainer.default_root_dir
        if not self.trainer.is_global_zero:
            return
        merged: dict[str, Any] = {}
        for r in results:
            merged.update({k: v for k, v in r.items() if k.startswith(prefix)})
        path = write_metrics(merged, log_dir)
        print(f"metrics written to {path}: {json.dumps({k: round(float(v), 4) for k, v in merged.items()})}")
