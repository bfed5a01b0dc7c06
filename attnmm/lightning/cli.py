"""The LightningCLI of the recipes: fit ends by testing the best checkpoint and writing metrics.json."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, _get_module_type, _InstantiatorFn

from attnmm.lightning.checkpoint import find_last_checkpoint


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
_SUBCOMMANDS = ("fit", "validate", "test", "predict")


def _accepts(config: Any, cls: Callable[..., Any] | None, key: str) -> bool:
    """Whether the saved hyperparameters ``config`` (of ``cls``) have a place for the dotted ``key``: each
    part on the way is there (not ``None``) and the last is a parameter of the class that holds it."""
    import importlib
    import inspect

    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(config, dict) or config.get(part) is None:
            return False
        config = config[part]
        if part == "init_args":
            continue
        path = config.get("class_path") if isinstance(config, dict) else None
        if path is not None:
            module, _, name = path.rpartition(".")
            cls = getattr(importlib.import_module(module), name, None)
    if not isinstance(config, dict) or cls is None:
        return False
    return leaf in inspect.signature(cls).parameters


class _LinkedInstantiator(_InstantiatorFn):
    """Lightning's instantiator (it records the values of instantiation links in the hyperparameters),
    keeping only the links whose target is there: jsonargparse skips a target the chosen class lacks
    (a ``SequenceTask`` has no ``num_classes``, a ``ClassificationTask`` no ``decoder``), Lightning
    would fail on it. It also writes the values of links into a part of a part (the encoder's
    ``rotary.init_args.head_dim``), which jsonargparse applies only while building that part, into the
    hyperparameters, so a checkpoint rebuilds the model."""

    def __call__(self, class_type: Any, *args: Any, applied_instantiation_links: dict, **kwargs: Any) -> Any:
        self.cli._dump_config()
        assert isinstance(self.cli, RecipeCLI)
        self.cli._fill_parse_links(self.cli.config_dump)
        hparams = self.cli.config_dump.get(self.key) or {}
        kept = {}
        for key, value in applied_instantiation_links.items():
            inner = key[len(f"{self.key}."):].removeprefix("init_args.")
            if not key.startswith(f"{self.key}.") or _accepts(hparams.get("init_args", hparams), class_type, inner):
                kept[key] = value
        return super().__call__(class_type, *args, applied_instantiation_links=kept, **kwargs)


class RecipeCLI(LightningCLI):
    """LightningCLI for the recipes (subcommands fit, validate, test, predict).

    It adds one option to every subcommand, ``--torch_threads N``, which sets PyTorch's intra-op
    threads before anything is built: small models on a busy CPU run far faster on one thread than
    on threads that wait for each other.

    ``fit --ckpt_path last`` resumes from the newest ``last*.ckpt`` of any earlier run in the
    run directory and goes on checkpointing next to it (Lightning alone looks only in the new run's
    ``version_N`` directory, and would forget the best checkpoint so far).

    Checkpoints are loaded with ``weights_only=True`` unless ``--weights_only=false`` is given.

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

    After ``fit`` it tests the best checkpoint (the last weights when no checkpoint was written,
    e.g. under ``--trainer.fast_dev_run=true``) and writes the test metrics (``test_acc``,
    ``test_loss``, ...) as ``metrics.json`` in the run's log directory; ``test`` writes them too.
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
            per_command = {cmd: defaults for cmd in _SUBCOMMANDS} if kwargs.get("run", True) else defaults
            kwargs.setdefault("parser_kwargs", per_command)
            kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(*args, **kwargs)
        # A process group left for interpreter teardown lets gloo's worker threads die inside
        # C++ destructors ("terminate called without an active exception", exit code 134) now
        # and then. Tear it down here, after a clean run only: after an exception the other
        # ranks may still be inside a collective and the teardown could hang.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--torch_threads", type=int | None, default=None,
            help="intra-op CPU threads for PyTorch (default: PyTorch's choice, one per core)",
        )
        # subclass mode: the class a config without ``class_path`` gets (its keys are that class's init_args)
        for key, cls in self._default_classes.items():
            if cls is not None:
                parser.set_defaults({key: {"class_path": f"{cls.__module__}.{cls.__qualname__}"}})
        for link in self._links:
            sources = (link.source,) if isinstance(link.source, str) else link.source
            source = tuple(self._subclass_key(s) for s in sources)
            parser.link_arguments(
                source[0] if len(source) == 1 else source, self._subclass_key(link.target),
                compute_fn=link.compute_fn, apply_on=link.apply_on,
            )

    def _add_instantiators(self) -> None:
        # Lightning's two instantiators, tolerant of link targets the chosen classes lack
        for key, cls, subclasses in (("model", self._model_class, self.subclass_mode_model),
                                     ("data", self._datamodule_class, self.subclass_mode_data)):
            instantiator = _LinkedInstantiator(cli=self, key=key)
            self.parser.add_instantiator(instantiator, _get_module_type(cls), subclasses=subclasses)

    def _subclass_key(self, key: str) -> str:
        """``model.x`` as ``model.init_args.x`` when the model is parsed in subclass mode (same for data)."""
        root, dot, rest = key.partition(".")
        if dot and root in self._subclass_roots() and not rest.startswith("init_args."):
            return f"{root}.init_args.{rest}"
        return key

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        if self.subclass_mode_model or self.subclass_mode_data:
            args = _nested_nulls_as_json(list(sys.argv[1:] if args is None else args), self._subclass_roots())
        if self._links and isinstance(args, list | None):
            args = list(sys.argv[1:] if args is None else args)
            if "--print_config" in args:
                # jsonargparse leaves link targets out of --print_config; show the resolved values
                super().parse_arguments(parser, [a for a in args if a != "--print_config"])
                print(self._resolved_config(parser), end="")
                sys.exit(0)
        super().parse_arguments(parser, args)

    def _resolved_config(self, parser: LightningArgumentParser) -> str:
        """The parsed config as YAML with every link target filled in: the parse links' values, and
        the instantiation links' values read from the DataModule (built for it, as a run would)."""
        import yaml

        command = self.config.get("subcommand")
        dump = yaml.safe_load(parser.dump(self.config, skip_link_targets=False, skip_none=False, format="yaml"))
        config = dump[command] if command else dump
        self._fill_parse_links(config)
        data = None
        for link in self._links:
            if link.apply_on != "instantiate":
                continue
            if data is None:
                data = self._build_data(config.get("data") or {})
            sources = (link.source,) if isinstance(link.source, str) else link.source
            values = [getattr(data, s.split(".", 1)[1]) for s in sources]
            value = values[0] if link.compute_fn is None else link.compute_fn(*values)
            target = self._subclass_key(link.target)
            root = self.model_class if target.startswith("model.") else self.datamodule_class
            if _accepts(config, root, target):  # a part that is there (not ``head: null``) and takes it
                *parents, leaf = target.split(".")
                node: Any = config
                for key in parents:
                    node = node[key]
                node[leaf] = value
        return yaml.safe_dump(config, sort_keys=False)

    def _fill_parse_links(self, config: dict[str, Any]) -> None:
        """Write the values of the parse links into ``config`` (a dumped config), where the target is a
        parameter of the class there and every source is given (as jsonargparse applies them)."""
        for link in self._links:
            if link.apply_on != "parse":
                continue
            sources = (link.source,) if isinstance(link.source, str) else link.source
            values = []
            for source in sources:
                node: Any = config
                for key in self._subclass_key(source).split("."):
                    node = node.get(key) if isinstance(node, dict) else None
                values.append(node)
            target = self._subclass_key(link.target)
            root = self.model_class if target.startswith("model.") else self.datamodule_class
            if any(v is None for v in values) or not _accepts(config, root, target):
                continue
            *parents, leaf = target.split(".")
            node = config
            for key in parents:
                node = node[key]
            value = values[0] if link.compute_fn is None else link.compute_fn(*values)
            node[leaf] = copy.deepcopy(value)  # (a value of its own: no YAML anchor in the printout)

    def _build_data(self, config: dict[str, Any]) -> Any:
        import importlib

        if "class_path" in config:
            module, _, name = config["class_path"].rpartition(".")
            return getattr(importlib.import_module(module), name)(**config.get("init_args", {}))
        cls: Any = self.datamodule_class
        return cls(**config)

    def _subclass_roots(self) -> tuple[str, ...]:
        return ("model",) * self.subclass_mode_model + ("data",) * self.subclass_mode_data

    def before_instantiate_classes(self) -> None:
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        threads = config.get("torch_threads")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"--torch_threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)

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
        results = trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt, weights_only=True)
        self._write(results)

    def after_test(self) -> None:
        self._write([dict(self.trainer.callback_metrics)])

    def _write(self, results: list[dict[str, Any]]) -> None:
        # every process asks: under DDP ``log_dir`` is a broadcast from rank 0
        log_dir = self.trainer.log_dir or self.trainer.default_root_dir
        if not self.trainer.is_global_zero:
            return
        merged: dict[str, Any] = {}
        for r in results:
            merged.update({k: v for k, v in r.items() if k.startswith("test")})
        path = write_metrics(merged, log_dir)
        print(f"metrics written to {path}: {json.dumps({k: round(float(v), 4) for k, v in merged.items()})}")
