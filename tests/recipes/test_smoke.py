"""Every recipe's smoke run (``fit --trainer.fast_dev_run=true``) on any machine: on the real data
under ``$ATTNMM_DATA`` when it is there, else on generated files in the formats the DataModules read
(FSDD WAVs, MNIST IDX files, Tiny Shakespeare text, UD CoNLL-U, Planetoid's raw graph). And the
links of the recipes: a width or a class count written once resolves everywhere, and a Planetoid
graph of another width and class count needs only ``--data.name``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _recipes import (
    SMOKE,
    config_path,
    generated_args,
    real_root,
    recipe_main,
    run_recipe,
    smoke_args,
    smoke_params,
    write_planetoid,
)

from attnmm.lightning import ClassificationTask, Ensemble


@pytest.mark.parametrize("recipe", smoke_params())
def test_fast_dev_run(recipe: str, tmp_path: Path) -> None:
    """Also, from the same run: what text_pos says of the real UD English-EWT (no test file), and the
    attention maps of graph_graph's GPS layers (once, they gave no picture)."""
    args = ["fit", "--trainer.fast_dev_run=true", "--torch_threads=1", "--trainer.enable_model_summary=false"]
    proc = run_recipe(recipe, [*args, *smoke_args(recipe)], tmp_path)
    (path,) = tmp_path.glob("runs/**/metrics.json")
    metrics = json.loads(path.read_text())
    assert {"test_acc", "test_loss"} <= set(metrics) and all(v == v for v in metrics.values())  # no NaN
    assert "metrics written to" in proc.stdout
    if recipe == "text_pos" and real_root("ud_english_ewt") is not None:
        assert set(metrics) == {"test_acc", "test_loss"} and 0.0 <= metrics["test_acc"] <= 1.0
        assert "test en_ewt-ud-dev.conllu (en_ewt-ud-test.conllu not found: testing on dev)" in proc.stdout
    if recipe == "graph_graph":
        run = tmp_path / "runs" / "graph_graph" / "version_0"
        ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        layers = ckpt["hyper_parameters"]["encoder"]["init_args"].get("num_layers", 2)
        pictures = [f"attention_layer{i}.png" for i in range(layers)]
        assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()) == [
            *pictures, "checkpoints/last.ckpt", "metrics.json"]
        assert all((run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in pictures)
        assert "attention maps written to" in proc.stdout


def _hparams(recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    cli = recipe_main(recipe)([*args, *generated_args(recipe)], run=False)
    hparams = dict(cli.model.hparams)
    model = cli.model
    if isinstance(model, Ensemble):  # Ensemble(model, size): the model's own
        model, hparams = model.members[0], {**hparams["model"]["init_args"], "_instantiator": hparams["_instantiator"]}
    assert isinstance(model, ClassificationTask)
    return hparams


# recipe -> (config or None, the width d_model, the number of classes) as recorded in docs/results.md
WRITTEN_ONCE = {
    "graph_graph": (None, 64, 2),
    "image_patches": (None, 96, 10),
    "image_patches_cnn": ("image_patches_cnn.yaml", 96, 10),
    "text_lm": (None, 192, 67),
    "text_lm_lstm": ("text_lm_lstm.yaml", 192, 67),
    "text_pos": (None, 192, 17),
    "text_pos_lstm": ("text_pos_lstm.yaml", 192, 17),
}


@pytest.mark.parametrize("name", sorted(WRITTEN_ONCE))
def test_linked_values_resolve(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The width (the adapter's) and the class count (the data's or the vocabulary's) reach the encoder
    and the head, and the saved hyperparameters (what a checkpoint rebuilds from) hold them."""
    config, width, classes = WRITTEN_ONCE[name]
    recipe = name.removesuffix("_cnn").removesuffix("_lstm")
    extra = [] if config is None else [f"--config={config_path(config)}"]
    hp = _hparams(recipe, tmp_path, monkeypatch, *extra)
    widths = {part: hp[part]["init_args"].get("d_model") for part in ("adapter", "encoder", "head")}
    assert widths == {"adapter": width, "encoder": width, "head": width}
    assert hp["num_classes"] == hp["head"]["init_args"]["num_classes"] == classes


def test_text_pos_vocabularies_are_the_data_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hp = _hparams("text_pos", tmp_path, monkeypatch, "--data.max_words=123", "--data.max_chars=45")
    assert (hp["adapter"]["init_args"]["vocab_size"], hp["adapter"]["init_args"]["char_vocab_size"]) == (123, 45)


def test_a_width_given_once_changes_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hp = _hparams("graph_graph", tmp_path, monkeypatch, "--model.adapter.init_args.d_model=16")
    assert [hp[p]["init_args"]["d_model"] for p in ("adapter", "encoder", "head")] == [16, 16, 16]


@pytest.fixture(scope="module")
def two_graphs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated Cora (5 features, 3 classes) and CiteSeer (9 features, 4 classes)."""
    root = tmp_path_factory.mktemp("planetoid")
    write_planetoid(root, "Cora", features=5, classes=3)
    write_planetoid(root, "CiteSeer", features=9, classes=4)
    return root


@pytest.mark.parametrize("config", [None, "graph_node_gat.yaml"])
def test_graph_node_follows_the_graph(two_graphs: Path, tmp_path: Path, config: str | None) -> None:
    """``--data.name CiteSeer`` is the one flag that switches graphs: the model takes its widths from
    the data (once a shape error until four values were changed by hand)."""
    extra = [] if config is None else [f"--config={config_path(config)}"]
    for name, (features, classes) in {"Cora": (5, 3), "CiteSeer": (9, 4)}.items():
        cwd = tmp_path / name
        cwd.mkdir()
        args = ["fit", "--trainer.max_epochs=1", f"--data.root={two_graphs}", "--data.name", name, *extra]
        run_recipe("graph_node", args, cwd)
        (ckpt,) = cwd.glob("runs/**/last.ckpt")
        task = ClassificationTask.load_from_checkpoint(ckpt, weights_only=True)  # rebuilt from the hparams
        assert (task.num_classes, task.adapter.in_channels) == (classes, features)
        encoder = torch.load(ckpt, weights_only=True)["hyper_parameters"]["encoder"]["init_args"]
        assert (encoder["in_channels"], encoder["out_channels"]) == (features, classes)


def test_every_recipe_is_smoke_tested() -> None:
    recipes = {p.stem for p in (Path(__file__).parents[2] / "recipes").glob("*.py")}
    # that one: tests/recipes/test_multimodal_digits.py
    assert set(SMOKE) == recipes - {"multimodal_digits"}


@pytest.mark.parametrize("config", [None, "speech_truncated_strings.yaml"])
def test_speech_heads_take_the_data_classes(
    config: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In subclass mode a link reaches the parts the chosen task has and skips the others: the default
    ClassificationTask's num_classes and head, the strings config's SequenceTask CTC head and decoder."""
    monkeypatch.chdir(tmp_path)
    extra = [] if config is None else [f"--config={config_path(config)}"]
    cli = recipe_main("speech_truncated")([*extra, *generated_args("speech_truncated")], run=False)
    hp = dict(cli.model.hparams)
    parts = ("head",) if config is None else ("ctc_head", "decoder")
    assert [hp[p]["init_args"]["num_classes"] for p in parts] == [10] * len(parts)
    assert hp.get("num_classes") == (10 if config is None else None)


@pytest.mark.parametrize("heads", [None, 4])
def test_head_width_follows_width_and_heads(heads: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rotary embedding's head_dim is d_model / num_heads and the position bias has num_heads heads,
    in the built model and in the hyperparameters a checkpoint rebuilds it from."""
    extra = [] if heads is None else [f"--model.encoder.init_args.num_heads={heads}"]
    hp = _hparams("text_pos", tmp_path, monkeypatch, *extra)
    num_heads = heads or 6
    encoder = hp["encoder"]["init_args"]
    assert encoder["rotary"]["init_args"]["head_dim"] == 192 // num_heads
    assert encoder["position_bias"]["init_args"]["num_heads"] == num_heads
    from lightning.pytorch.cli import instantiate_module  # what load_from_checkpoint calls

    rebuilt = instantiate_module(ClassificationTask, {k: v for k, v in hp.items() if k != "_instantiator"})
    assert rebuilt.encoder.position_bias.num_heads == num_heads
    assert rebuilt.encoder.layers[0].attn.rotary.head_dim == 192 // num_heads


@pytest.mark.parametrize("config,scores,heads", [(None, "additive", 8), ("graph_node_appnp.yaml", "uniform", 1)])
def test_graph_node_default_learns_attention(
    config: str | None, scores: str, heads: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Cora default propagates by learned additive attention (8 heads); graph_node_appnp.yaml is
    the same model with uniform weights, the previous default."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    extra = [] if config is None else [f"--config={config_path(config)}"]
    cli = recipe_main("graph_node")([*extra, *generated_args("graph_node")], run=False)
    encoder = cli.model.encoder
    assert (encoder.scores, encoder.heads, encoder.steps, encoder.alpha, encoder.pair_dropout) == (
        scores,
        heads,
        10,
        0.1,
        0.5,
    )
    assert cli.model.hparams["lr"] == 0.01 and cli.model.hparams["optimizer"]["weight_decay"] == 5e-4


def test_an_ensemble_wraps_the_task_and_the_former_options_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ensemble: 2`` (text_pos's default) wraps the task in an Ensemble; ``--ensemble`` sets the size, and
    the option the task once took (``--model.ensemble``, a class or its size, or null) is read as it, with a
    warning."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    main = recipe_main("text_pos")
    cli = main(["--ensemble=3", *generated_args("text_pos")], run=False)
    assert isinstance(cli.model, Ensemble) and cli.model.size == 3 and cli.model.hparams["size"] == 3
    for former, size in (["--model.ensemble=null"], 1), (["--model.ensemble.init_args.size", "4"], 4):
        with pytest.warns(FutureWarning, match="--model.ensemble.* is now --ensemble"):
            cli = main([*former, *generated_args("text_pos")], run=False)
        assert len(getattr(cli.model, "members", [cli.model])) == size
