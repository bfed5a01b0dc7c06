"""The LightningCLI of the recipes: trainer defaults said once, a run directory named after the config, and
``fit`` ending by testing the best checkpoint and writing metrics.json."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import importlib
import inspect
import json
import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
import yaml
from jsonargparse import DefaultHelpFormatter, Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning_utilities.core import rank_zero

from attnmm import _recipes
from attnmm.lightning.callbacks import AttentionMapPNG
from attnmm.lightning.checkpoint import RandomState, find_last_checkpoint
from attnmm.lightning.task import Ensemble
from attnmm.lightning.transfer import Transfer

#: Set to 1 for the full traceback of a recipe's error (otherwise one short message).
DEBUG_ENV = "ATTNMM_DEBUG"


def _no_promotion(record: logging.LogRecord) -> bool:
    """False for Lightning's advertisements of its cloud services ("💡 Tip: ... litlogger / litmodels")."""
    message = record.getMessage()
    return not ("Tip:" in message and "pypi.org/project/lit" in message)


def _quiet_noise() -> None:
    """Keep out of a recipe's output what its user cannot act on: Lightning's advertisements (on the loggers
    its ``rank_zero_info`` writes to) and two deprecation warnings raised inside the libraries, Lightning's
    use of torch's ``LeafSpec`` and PyG's of ``torch.jit.script`` as its modules are imported."""
    named = (logging.getLogger(f"lightning.{p}.utilities.rank_zero") for p in ("pytorch", "fabric"))
    for log in {rank_zero.log, *named}:
        if _no_promotion not in log.filters:
            log.addFilter(_no_promotion)
    warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)`", FutureWarning, r"lightning\.")
    warnings.filterwarnings("ignore", r"`torch\.jit\.script` is deprecated", FutureWarning, r"torch\.jit\.")


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


#: Task options read at their place since the task composes its parts: ``--model.init_from`` (also
#: ``--model.init_args.init_from``) is ``--transfer.init_from``, ``--model.weight_decay`` is
#: ``--model.optimizer.weight_decay``, ``--model.optimizer=adam`` is ``--model.optimizer.kind=adam``;
#: ``--model.ensemble`` (or its ``.init_args.size``) is ``--ensemble``, with a warning.
MOVED_OPTIONS = {"init_from": "transfer.", "freeze_encoder_epochs": "transfer.", "init_into": "transfer.",
                 "weight_decay": "model.optimizer.", "warmup_fraction": "model.optimizer.",
                 "min_lr_ratio": "model.optimizer.", "optimizer=adam": "model.optimizer.kind=adam",
                 "optimizer=adamw": "model.optimizer.kind=adamw"}


def _moved_options(args: list[str], subclass_model: bool) -> list[str]:
    """``args`` with the :data:`MOVED_OPTIONS` at their place."""
    out = []
    for arg in args:
        name = arg.removeprefix("--model.").removeprefix("init_args.") if arg.startswith("--model.") else ""
        key, eq, value = name.partition("=")
        if key in ("ensemble", "ensemble.size", "ensemble.init_args.size"):
            warnings.warn(f"--model.{key} is now --ensemble (the number of models)", FutureWarning, stacklevel=2)
            out.append(f"--ensemble{eq}{value}")
            continue
        place = MOVED_OPTIONS.get(name) or MOVED_OPTIONS.get(key, "")
        if place and subclass_model:
            place = place.replace("model.", "model.init_args.")
        out.append(arg if not place else f"--{place}" if "=" in place else f"--{place}{name}")
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


def _did_you_mean(key: str, options: Sequence[str]) -> str:
    """`` (did you mean --x?)`` for the option among ``options`` closest to the misspelled ``key``."""
    close = difflib.get_close_matches(key, options, 1, 0.6)
    return f" (did you mean {close[0]}?)" if close else ""


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


def debug_mode() -> bool:
    """Whether ``$ATTNMM_DEBUG`` asks for full tracebacks (any value but empty, 0, false or no)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


_ROLE = re.compile(r":(?:[\w-]+:)*[\w-]+:`(~?)([^`]*)`")
_LITERAL = re.compile(r"``([^`]*)``")


def plain_text(text: str) -> str:
    r"""Docstring text as it reads in a terminal: reST roles, inline literals and ``.. math::`` directives
    replaced by their content (a ``~`` role by the last part of the name).

    Examples:
        >>> plain_text(":class:`~attnmm.masks.Window` of ``left`` frames (default: :obj:`None`)")
        'Window of left frames (default: None)'
        >>> plain_text(r"the set :math:`A(i)`; :func:`attnmm.attend`")
        'the set A(i); attnmm.attend'
    """

    def role(match: re.Match[str]) -> str:
        content = match.group(2).strip()
        return content.rsplit(".", 1)[-1] if match.group(1) else content

    text = _ROLE.sub(role, text)
    text = re.sub(r":(?:[\w-]+:)*[\w-]+:`~?", "", text)  # a role cut off by a line end (a first line)
    text = _LITERAL.sub(r"\1", text)
    text = re.sub(r"`([^`\n]*)`", r"\1", text)  # the default role
    text = re.sub(r"\.\. [\w-]+::\s*", "", text)  # directives (math, note, warning): their text stays
    text = re.sub(r"\\hat\{(\w)\}", "\\1\u0302", text)  # LaTeX as it reads: \hat{y} -> y with a hat
    text = re.sub(r"\\(?:mathrm|mathbf|mathbb|mathcal|text|operatorname)\{([^{}]*)\}", r"\1", text)
    for command, symbol in _LATEX.items():
        text = text.replace(command, symbol)
    return text


_LATEX = {"\\in ": "∈ ", "\\cdot": "·", "\\le ": "≤ ", "\\ge ": "≥ ", "\\infty": "∞", "\\sum": "Σ",
          "\\exp": "exp", "\\sqrt": "sqrt", "\\odot": "⊙", "\\times": "×", "\\;": " ", "\\,": " ",
          "\\lambda": "λ", "\\alpha": "α", "\\beta": "β", "\\sigma": "σ", "\\tau": "τ", "\\ldots": "..."}


def _init_params(class_path: str) -> list[str]:
    """The ``__init__`` parameters of the class at ``class_path`` (none when it cannot be imported)."""
    try:
        cls = _class({"class_path": class_path}, None)
        return [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    except Exception:  # an unknown or unimportable class: no suggestion
        return []


def _reason(err: BaseException) -> BaseException:
    """The exception that says what is wrong: ``err`` with jsonargparse's wrappers (raised inside it: the
    innermost frame is there) around it taken off."""
    while True:
        inner = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        frames = list(traceback.walk_tb(err.__traceback__))
        if inner is None or not (frames and f"{os.sep}jsonargparse{os.sep}" in frames[-1][0].f_code.co_filename):
            return err
        err = inner


_NOISE = (
    "Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
    "Given value:", "Expected a <class 'NoneType'>", "Problem with given class_path",
)


def _condensed(message: str) -> str:
    """jsonargparse's nested parse error ``message`` as one line: the reasons without the wrappers."""
    reasons: list[str] = []
    for line in message.splitlines():
        line = re.sub(r'^(-\s*)?Parser key "[^"]+":\s*', "", line.strip()).lstrip("- ").strip()
        line = re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1", line)
        if line and not line.startswith(_NOISE) and line != "Expected a NoneType" and line not in reasons:
            reasons.append(line)
    return "; ".join(reasons) or message.strip()


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help layout with docstrings as plain text (:func:`plain_text`) and the description's
    line breaks kept (the recipe header)."""

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))

    def start_section(self, heading: str | None) -> None:
        super().start_section(None if heading is None else plain_text(heading))


class RecipeArgumentParser(LightningArgumentParser):
    """The recipes' parser: an error on the command line is one short message (with "did you mean" for a
    misspelled option, :meth:`RecipeCLI.parse_error_text`). ``$ATTNMM_DEBUG=1`` gives jsonargparse's own
    report."""

    recipe_cli: RecipeCLI | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)  # also for a subclass's help (--model.help)
        super().__init__(*args, **kwargs)

    def format_help(self, formatter: Any = None) -> str:
        # a subcommand's usage lists every option (70 lines), which the help lists anyway: one line, so that
        # the recipe's header is on the first screen
        text = super().format_help(formatter)
        usage, _, rest = text.partition("\n\n")
        long = usage.startswith("usage:") and usage.count("\n") > 3
        return f"usage: {self.prog} [options]\n\n{rest}" if long else text

    def error(self, message: str, ex: Exception | None = None) -> Any:  # type: ignore[override]
        cli = self.recipe_cli
        if not self.exit_on_error or debug_mode() or cli is None or cli.argv is None:
            return super().error(message, ex)
        # the subcommand's parser, where jsonargparse says which (as its own report does)
        sys.stderr.write(cli.parse_error_text(message, getattr(ex, "subcommand_parser", None) or self) + "\n")
        sys.exit(2)


class RecipeCLI(LightningCLI):
    """LightningCLI for the recipes (subcommands fit, validate, test, predict), with the trainer
    defaults that every recipe shares said here once.

    Described on the recipes page (docs/recipes/index.md); in short: trainer defaults (the CPU, one device,
    a run directory ``runs/<name>`` after the last ``--config`` file with TensorBoard and CSV logs, atomic
    checkpoints, ``seed_everything: 0``, :class:`~attnmm.lightning.RandomState` and
    :class:`~attnmm.lightning.AttentionMapPNG` callbacks) that a config or the command line overrides;
    keys of their own, ``checkpoint:`` (a ``ModelCheckpoint``, best by ``val_acc`` unless ``monitor`` says,
    named by :func:`best_checkpoint_name`), ``transfer:`` (:class:`~attnmm.lightning.Transfer`) and
    ``ensemble: N`` (the task wrapped in an :class:`~attnmm.lightning.Ensemble`), older task options read
    at their place (:data:`MOVED_OPTIONS`); the options ``--torch_threads N`` and, for ``fit``,
    ``--test_after_fit`` (default true: test the best checkpoint and write ``metrics.json``; false:
    validate it); ``fit --ckpt_path last`` resumes; checkpoints load with ``weights_only=True``; errors
    from the command line are one short message naming the option (``ATTNMM_DEBUG=1``: the traceback);
    in subclass mode a config picks the classes by ``class_path`` (``default_model``, ``default_data``).

    A recipe is its task module, its DataModule, its default config and its links::

        RecipeCLI(ClassificationTask, MNISTDataModule, config="configs/image_patches.yaml",
                  links=WIDTH_LINKS + CLASS_LINKS)

    ``config`` is the default config file of every subcommand (``--config`` files apply on top).
    ``links`` (:class:`Link`) say where a value that several arguments share comes from; their keys are
    written as for a fixed class and get ``init_args`` inserted in subclass mode. ``--print_config``
    shows the linked values too.
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
        self.recipe_config = None if config is None else Path(config)
        self.run_dir: Path | None = None
        #: the command line as parsed (``None`` until then, or when given as a dict)
        self.argv: list[str] | None = None
        self.argv_given: list[str] = []  # the command line as given (self.argv: with MOVED_OPTIONS at their place)
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
        kwargs.setdefault("parser_class", RecipeArgumentParser)
        from_command_line = kwargs.get("args") is None
        _quiet_noise()
        try:
            super().__init__(*args, **kwargs)
        except Exception as err:
            # a person at a terminal gets one message; a program (args given) and ATTNMM_DEBUG=1 the exception
            if not from_command_line or debug_mode():
                raise
            lines = [self.error_text(err)]
            if isinstance(_reason(err), FileNotFoundError):
                env = os.environ.get("ATTNMM_DATA", "").strip() or "not set"
                lines.append(f"(data is looked for in --data.root, else $ATTNMM_DATA ({env}), else ~/.cache/attnmm; "
                             "python -m attnmm lists the datasets there)")
            sys.stderr.write("\n".join([*lines, f"({DEBUG_ENV}=1 shows the traceback)"]) + "\n")
            sys.exit(1)
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
            "enable_progress_bar": True,
            # persistent: resume draws the same random numbers; the run's attention maps as PNG files
            "callbacks": [RandomState(), AttentionMapPNG()],
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
        parser.add_lightning_class_args(Transfer, "transfer")  # starting from a trained model
        parser.add_argument(
            "--ensemble", type=int | None, default=None,
            help="train N independently initialised copies of the model side by side and predict with their mean "
                 "probabilities (attnmm.lightning.Ensemble); null or 1: one model",
        )
        parser.set_defaults({"checkpoint.monitor": "val_acc", "checkpoint.mode": "max", "checkpoint.save_last": True})
        # subclass mode: the class a config without ``class_path`` gets (its keys are that class's init_args)
        for key, cls in self._default_classes.items():
            if cls is not None:
                parser.set_defaults({key: {"class_path": f"{cls.__module__}.{cls.__qualname__}"}})
        for link in self._links:
            source = tuple(self._subclass_key(s) for s in link.sources)
            # a computed class_path config (an objective chosen by the data) is built for the run, and
            # recorded as the config it is (see _resolved)
            compute = None if link.compute_fn is None else (lambda *v, link=link: _built(link.value(v)))
            parser.link_arguments(
                source[0] if len(source) == 1 else source, self._subclass_key(link.target),
                compute_fn=compute, apply_on=link.apply_on,
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

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        header = self._header()
        if header:
            kwargs["description"] = header + (f"\n\n{kwargs['description']}" if kwargs.get("description") else "")
        parser = super().init_parser(**kwargs)
        if isinstance(parser, RecipeArgumentParser):
            parser.recipe_cli = self
        return parser

    def _header(self) -> str | None:
        """The help's first lines: the recipe, what it does, and its configs."""
        if self.recipe_config is None:
            return None
        folder, name = self.recipe_config.resolve().parent.parent, self.recipe_config.stem
        script = folder / f"{name}.py"
        if not script.is_file():
            return None
        shown, configs = _recipes.shown, _recipes.recipe_configs(folder, name)
        lines = [f"{script.name}: {_recipes.summary(script)}", f"  default config: {shown(self.recipe_config)}"]
        variants = [c.name for c in configs if c.resolve() != self.recipe_config.resolve()]
        if variants:
            where = shown(self.recipe_config.parent)
            lines.append(f"  other configs (--config {where}/<name>): {', '.join(variants)}")
        return "\n".join(lines)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        if isinstance(args, list | None):
            self.argv_given = list(sys.argv[1:] if args is None else args)
            args = _moved_options(self.argv_given, self.subclass_mode_model)
            if self.subclass_mode_model or self.subclass_mode_data:
                args = _nested_nulls_as_json(args, self._subclass_roots())
            self.argv = list(args)
            if "--print_config" in args:
                # jsonargparse leaves link targets out of --print_config; show the resolved values
                self._parse(parser, [a for a in args if a != "--print_config"])
                print(yaml.safe_dump(self._resolved(), sort_keys=False), end="")
                sys.exit(0)
        self._parse(parser, args)

    def _parse(self, parser: LightningArgumentParser, args: Any) -> None:
        # LightningCLI.parse_arguments less its warning about args given with a command line: the
        # command line is what this class passes as args
        self.config = parser.parse_object(args) if isinstance(args, dict | Namespace) else parser.parse_args(args)

    # ------------------------------------------------------------------ errors a person reads

    def parse_error_text(self, message: str, parser: argparse.ArgumentParser | None = None) -> str:
        """The short report of the parse error ``message`` (jsonargparse's): the option and what is wrong
        with it, a "did you mean" for a misspelled option or command, and where the options are listed."""
        argv = self.argv or []
        prog = Path(sys.argv[0]).name
        commands = list(self.subcommands())
        command = next((a for a in argv if a in commands), None)
        hint = f"({prog} {command or '<command>'} --help lists the options)"
        if command is None:
            given = next((a for i, a in enumerate(argv) if not a.startswith("-")
                          and (i == 0 or not argv[i - 1].startswith("-") or "=" in argv[i - 1])), None)
            if given is not None:
                maybe = _did_you_mean(given, commands)
                return f"error: {given!r} is not a command{maybe}; the commands: {', '.join(commands)}"
            if "subcommand" in message.lower():
                return f"error: no command given; the commands: {', '.join(commands)} (e.g. {prog} fit)"
        parser = parser or self.parser
        keys = [a.split("=", 1)[0] for a in argv if a.startswith("--")]
        lines = [f"error: {key} is not an option{of}{_did_you_mean(key, options)}"
                 for key, of, options in self._unknown_options(parser, keys, message)]
        if not lines and message.startswith("unrecognized arguments"):
            negative = [f"{argv[i - 1]}={a}" for i, a in enumerate(argv) if i and re.fullmatch(r"-[\d.]+", a)
                        and argv[i - 1].startswith("--") and "=" not in argv[i - 1]]
            if negative:
                lines = [f"error: write a negative value with '=': {', '.join(negative)}"]
        if not lines:
            keys_in = re.findall(r'Parser key "([^"]+)"', message)
            key = next((k for k in keys if keys_in and (k == f"--{keys_in[-1]}" or k.endswith(f".{keys_in[-1]}"))),
                       f"--{'.'.join(keys_in)}" if keys_in else None)
            lines = [f"error: {key + ': ' if key else ''}{_condensed(message)}"]
        if re.search(r"model\.(init_args\.)?ensemble|Option 'ensemble", message):  # the task's former option
            lines.append("(an ensemble is a key of its own now: ensemble: N at a config's top level, or --ensemble N)")
        return "\n".join([*lines, hint])

    @staticmethod
    def _unknown_options(
        parser: argparse.ArgumentParser, keys: list[str], message: str
    ) -> list[tuple[str, str, list[str]]]:
        """``(key, " of <class>", the options it may have meant)`` of each option in ``keys`` that the
        ``parser`` or the class under it (named in the error ``message``) does not take."""
        usage = parser.format_usage()
        known = set(re.findall(r"(--[\w.]+)", usage)) | {"--help", "--print_config", "--config"}  # -c in the usage
        # options that take a class's keys (--model.lr, --model.init_args.lr)
        nested = set(re.findall(r"(--[\w.]+) CONFIG \| CLASS_PATH_OR_NAME", usage))
        unknown = [(key, "", sorted(known)) for key in keys
                   if key not in known and not any(key.startswith(f"{root}.") for root in nested)]
        for class_path, option in re.findall(r"class_path '([\w.]+)':\s*Option '(\w+)' is not accepted", message):
            key = next((k for k in keys if k.endswith(f".{option}")), None)
            if key is not None:
                prefix = key[: -len(option)]
                of = f" of {class_path.rsplit('.', 1)[-1]}"
                unknown.append((key, of, [prefix + p for p in _init_params(class_path)]))
        return unknown

    def error_text(self, err: BaseException) -> str:
        """The one-line report of ``err``, raised while building or running the recipe: the option whose
        value was refused (when the error names a parameter of a class the config builds), then the reason."""
        reason = _reason(err)
        text = str(reason).strip() or type(reason).__name__
        if isinstance(reason, KeyError | OSError) and reason.args:
            text = str(reason.args[-1] if isinstance(reason, OSError) and len(reason.args) == 2 else reason.args[0])
        kind = "" if isinstance(reason, ValueError | TypeError | FileNotFoundError) else f"{type(reason).__name__}: "
        option = self._option_of(reason, text)
        return f"error: {option + ': ' if option else ''}{kind}{text}"

    def _option_of(self, err: BaseException, text: str) -> str | None:
        """The option (``--model.adapter.init_args.mask.init_args.left``) of the parameter that ``err``, raised
        in the ``__init__`` of a class the config builds, names in its message ``text``."""
        config = getattr(self, "config", None)
        if config is None:
            return None
        command = config.get("subcommand")
        tree = (config[command] if command else config).as_dict()
        words = re.findall(r"\w+", text)
        for frame, _ in traceback.walk_tb(err.__traceback__):
            owner = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
            if owner is None:
                continue
            for path, args in self._places_of(type(owner), tree):
                named = [w for w in words if w in args]
                if named:
                    return self._as_given(f"--{path}.{named[0]}")
        return None

    def _as_given(self, option: str) -> str:
        """``option`` as the command line wrote it (with or without ``init_args`` after a class's key), else
        without the ``init_args`` after a subclass-mode root (``--model.adapter...``)."""
        plain = option.replace(".init_args.", ".")
        for key in (a.split("=", 1)[0] for a in self.argv_given if a.startswith("--")):
            if plain in {k.replace(".init_args.", ".") for k in (key, *_moved_options([key], False))}:
                return key
        for root in self._subclass_roots():
            if option.startswith(f"--{root}.init_args."):
                return f"--{root}." + option[len(f"--{root}.init_args."):]
        return option

    def _places_of(self, cls: type, tree: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(dotted key, its arguments)`` of every place in the config ``tree`` that builds ``cls``."""
        found: list[tuple[str, dict[str, Any]]] = []

        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None

        def walk(node: Any, path: str, default: Any = None) -> None:
            if not isinstance(node, dict):
                return
            if fields is not None and set(node) == fields:  # a dataclass's fields (model.optimizer)
                found.append((path, node))
            if "class_path" in node:
                try:
                    built = _class(node, None)
                except Exception:  # a class that does not import: not the one that failed
                    built = None
                args = node.get("init_args") or {}
                if built is cls:
                    found.append((f"{path}.init_args", args))
                for key, value in args.items():
                    walk(value, f"{path}.init_args.{key}")
                return
            if default is cls:
                found.append((path, node))
            for key, value in node.items():
                walk(value, f"{path}.{key}")

        for root, default in (("model", self.model_class), ("data", self.datamodule_class),
                              ("trainer", self.trainer_class), ("checkpoint", ModelCheckpoint),
                              ("transfer", Transfer)):
            walk(tree.get(root), root, default)
        return found

    def _resolved(self, data: Any = None) -> dict[str, Any]:
        """The parsed config as plain data with every link target filled in: the parse links' values, and
        the instantiation links' values read from the DataModule ``data`` (built from the config when
        ``None``, as a run would)."""
        # the subcommand's config with the link targets jsonargparse filled
        config = yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False, skip_none=False, format="yaml"))
        config = config[self.config["subcommand"]] if self.config.get("subcommand") else config
        # the parse links first (they may fill in the data's config), where every source is given and the
        # target is a parameter of the class there, as jsonargparse applies them
        for link in (link for link in self._links if link.apply_on == "parse"):
            values = [_get(config, self._subclass_key(source)) for source in link.sources]
            target = self._subclass_key(link.target)
            if all(v is not None for v in values) and _accepts(config, self._root_class(target), target):
                _set(config, target, link.value(values))
        if config.get("checkpoint", {}).get("filename") is None:
            config["checkpoint"]["filename"] = best_checkpoint_name(config["checkpoint"]["monitor"])
        for link in self._links:
            target = self._subclass_key(link.target)
            if link.apply_on != "instantiate" or not _accepts(config, self._root_class(target), target):
                continue
            if data is None:
                node = config.get("data") or {}
                data = _class(node, self.datamodule_class)(**_built(node.get("init_args", {}) if "class_path" in node
                                                                      else node))
            _set(config, target, link.value([getattr(data, s.split(".", 1)[1]) for s in link.sources]))
        return config

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
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        if config.get("ensemble") not in (None, 1):  # (Ensemble refuses a size < 2)
            self.model = Ensemble(self.model, config["ensemble"])
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            built = self.config_init.get(str(self.subcommand), self.config_init) if self.subcommand else None
            self._last_every_epoch(trainer, (built or self.config_init).get("checkpoint"))
        if trainer is not None and trainer.fast_dev_run:
            self._own_run_dir(trainer)
        self._record_hyperparameters()

    @staticmethod
    def _last_every_epoch(trainer: Any, best: Any) -> None:
        """Make ``checkpoint.save_last: true`` write ``last.ckpt`` at the end of every epoch. Lightning's
        ``ModelCheckpoint`` writes it only when it also writes a best checkpoint, so a fit stopped after its
        best epoch would resume from that epoch, and a finished fit would train again from there. The
        ``checkpoint`` callback gets a second one right after it that writes ``last.ckpt`` after every epoch
        (no monitor, one file named ``last``); its own writes of ``last`` (beside a new best, and at the end
        of a smoke run) stay."""
        callbacks = trainer.callbacks
        if not isinstance(best, ModelCheckpoint) or best.save_last is not True or best not in callbacks:
            return
        last = ModelCheckpoint(dirpath=best.dirpath, filename=best.CHECKPOINT_NAME_LAST, monitor=None,
                               save_top_k=1, save_last=False, every_n_epochs=1, enable_version_counter=False)
        callbacks.insert(callbacks.index(best) + 1, last)

    def _own_run_dir(self, trainer: Any) -> None:
        """Give a ``fast_dev_run`` (which has no logger) its own ``version_N`` folder in the run directory,
        numbered as the loggers number theirs, for its checkpoints, metrics and pictures."""
        root = Path(trainer.default_root_dir)
        taken = [int(p.name[8:]) for p in root.glob("version_*") if p.name[8:].isdigit()]
        self.run_dir = root / f"version_{max(taken, default=-1) + 1}"
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(self.run_dir / "checkpoints")

    def _record_hyperparameters(self) -> None:
        # The model's hyperparameters are its resolved config, every linked value included, in the form
        # Lightning's ``instantiate_module`` rebuilds from: ``load_from_checkpoint(path)`` (and ``test
        # --ckpt_path``) rebuild the model a run trained. (Lightning's own recording is switched off:
        # it fails on a link into a part the chosen class lacks.)
        model = self._resolved(self.datamodule).get("model") or {}
        if not model:  # a model without arguments
            return
        if isinstance(self.model, Ensemble):  # rebuilt as Ensemble(model, size)
            cls, args = type(self.model.members[0]), model.get("init_args", {}) if "class_path" in model else model
            model = {"model": {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": args},
                     "size": self.model.size}
        elif "class_path" in model:
            model = {"_class_path": model["class_path"], **model.get("init_args", {})}
        self.model.save_hyperparameters({**model, "_instantiator": "lightning.pytorch.cli.instantiate_module"},
                                        logger=False)

    def before_validate(self) -> None:
        # checkpoints hold tensors and plain values only: load them without unpickling any code
        # (``--weights_only=false`` still opts out, e.g. for a checkpoint of another program)
        config = self.config_init[str(self.subcommand)]
        if config.get("weights_only") is None:
            config["weights_only"] = True

    before_test = before_predict = before_validate

    def before_fit(self) -> None:
        self.before_validate()
        config, trainer = self.config_init[str(self.subcommand)], self.trainer
        if config.get("ckpt_path") == "last":
            # Lightning looks for ``last`` only in the new run's version directory
            roots: list[str | Path] = [trainer.default_root_dir]
            roots += [logger.save_dir for logger in trainer.loggers if logger.save_dir]
            roots += [c.dirpath for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.dirpath]
            last = find_last_checkpoint(*roots)
            if last is not None:
                print(f"resuming from {last}")
                config["ckpt_path"] = str(last)
                # keep checkpointing where the run was, so the best-so-far state is restored too
                for callback in trainer.checkpoint_callbacks:
                    if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                        callback.dirpath = str(last.parent)

    def after_fit(self) -> None:
        trainer = self.trainer
        ckpt = "best" if getattr(trainer.checkpoint_callback, "best_model_path", "") else None
        test = self.config[str(self.subcommand)].get("test_after_fit", True)
        results = (trainer.test if test else trainer.validate)(
            self.model, datamodule=self.datamodule, ckpt_path=ckpt, weights_only=True)
        self._write(results, "test" if test else "val")

    def after_test(self) -> None:
        self._write([dict(self.trainer.callback_metrics)], "test")

    def _write(self, results: Sequence[Mapping[str, Any]], prefix: str) -> None:
        # every process asks: under DDP ``log_dir`` is a broadcast from rank 0
        log_dir = self.trainer.log_dir or self.trainer.default_root_dir
        if not self.trainer.is_global_zero:
            return
        merged: dict[str, Any] = {}
        for r in results:
            merged.update({k: v for k, v in r.items() if k.startswith(prefix)})
        path = write_metrics(merged, self.run_dir or log_dir)
        print(f"metrics written to {path}: {json.dumps({k: round(float(v), 4) for k, v in merged.items()})}")
        for callback in self.trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, AttentionMapPNG):
                pictures = callback.save(self.model, path.parent)
                if pictures:
                    print(f"attention maps written to {path.parent}: {', '.join(p.name for p in pictures)}")
                elif callback.skipped:
                    print(f"no attention maps: {callback.skipped}")
