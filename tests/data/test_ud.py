"""UD POS DataModule: CoNLL-U reading, splits, vocabularies from training only, batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnmm.data import UPOS_TAGS, UDPOSDataModule, read_conllu
from attnmm.data.ud import BucketSampler

CONLLU = """# sent_id = a
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t3:conj\t_

# sent_id = b
1\tGo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
2\tnow\tnow\tADV\tRB\t_\t1\tadvmod\t_\t_

"""


def _treebank(tmp_path: Path, dev: str = CONLLU, test: str | None = None) -> Path:
    folder = tmp_path / "ud_english_ewt"
    folder.mkdir()
    (folder / "en_ewt-ud-train.conllu").write_text(CONLLU)
    (folder / "en_ewt-ud-dev.conllu").write_text(dev.replace("go\tgo\tVERB", "went\tgo\tVERB"))
    if test is not None:
        (folder / "en_ewt-ud-test.conllu").write_text(test)
    return tmp_path


def test_read_skips_multiword_and_empty_nodes(tmp_path: Path) -> None:
    sents = read_conllu(_treebank(tmp_path) / "ud_english_ewt" / "en_ewt-ud-train.conllu")
    assert [s.words for s in sents] == [("do", "n't", "go"), ("Go", "now")]
    assert sents[0].tags == ("AUX", "PART", "VERB")
    assert sents[0].xpos == ("VBP", "RB", "VB") and sents[0].deprel == ("aux", "advmod", "root")
    assert sents[0].feats == ("_", "_", "_")
    featured = tmp_path / "feats.conllu"
    featured.write_text(CONLLU.replace("AUX\tVBP\t_", "AUX\tVBP\tMood=Ind|Tense=Pres"))
    assert read_conllu(featured)[0].feats == ("Mood=Ind|Tense=Pres", "_", "_")


def test_vocabularies_from_training_only_and_test_falls_back_to_dev(tmp_path: Path, capsys) -> None:
    dm = UDPOSDataModule(root=_treebank(tmp_path), batch_size=2)
    dm.setup()
    assert dm.test_split == "dev" and "testing on dev" in capsys.readouterr().out
    assert "went" not in dm.words and "go" in dm.words  # lower-cased training words only
    batch = next(iter(dm.val_dataloader()))
    assert batch["tokens"][0, 2] == 1  # "went" is unknown
    assert batch["tags"][0].tolist() == [UPOS_TAGS.index(t) for t in ("AUX", "PART", "VERB")]
    assert batch["tags"][1, 2] == -100 and batch["lengths"].tolist() == [3, 2]
    assert batch["chars"].shape == (2, 3, 4)  # the longest word, "went"
    restored = UDPOSDataModule(root=tmp_path)
    restored.load_state_dict(dm.state_dict())
    assert restored.words == dm.words and restored.chars == dm.chars


def test_test_file_is_used_when_present(tmp_path: Path) -> None:
    dm = UDPOSDataModule(root=_treebank(tmp_path, test=CONLLU.split("\n\n")[1] + "\n\n"))
    dm.setup()
    assert dm.test_split == "test" and len(dm.datasets["test"]) == 1


def test_holdout_validates_on_the_last_training_sentences(tmp_path: Path, capsys) -> None:
    dm = UDPOSDataModule(root=_treebank(tmp_path), batch_size=2, holdout=1)
    dm.setup()
    assert "validation those 1 sentences" in capsys.readouterr().out
    assert len(dm.datasets["train"]) == len(dm.datasets["val"]) == 1
    assert "now" not in dm.words and "do" in dm.words  # the held-out sentence builds no vocabulary
    assert dm.datasets["test"] is not dm.datasets["val"]  # the test set is still the dev file
    with pytest.raises(ValueError, match="leaves no training sentences"):
        UDPOSDataModule(root=tmp_path, holdout=2).setup()
    with pytest.raises(ValueError, match="holdout must be >= 0"):
        UDPOSDataModule(root=tmp_path, holdout=-1)


def test_unk_replace_scales_with_training_counts(tmp_path: Path) -> None:
    dm = UDPOSDataModule(root=_treebank(tmp_path), unk_replace=1.0)
    dm.setup()
    train = dm.datasets["train"]
    torch.manual_seed(0)
    draws = torch.stack([train[0][0] for _ in range(4000)])  # "do" "n't" "go": seen 1, 1 and 2 times
    unknown = (draws == 1).float().mean(0)
    assert torch.allclose(unknown, torch.tensor([1 / 2, 1 / 2, 1 / 3]), atol=0.03)  # alpha / (alpha + count)
    ids = train.items[0][0].expand_as(draws)
    assert torch.equal(draws[draws != 1], ids[draws != 1])  # kept words keep their id
    assert all(torch.equal(dm.datasets["val"][0][0], dm.datasets["val"][0][0]) for _ in range(20))  # val untouched
    plain = UDPOSDataModule(root=tmp_path)
    plain.setup()
    assert torch.equal(plain.datasets["train"][0][0], plain.datasets["train"][0][0])  # off by default
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="unk_replace must be a finite alpha >= 0"):
            UDPOSDataModule(root=tmp_path, unk_replace=bad)


def test_auxiliary_columns_from_training_labels(tmp_path: Path) -> None:
    root = _treebank(tmp_path, dev=CONLLU.replace("AUX\tVBP", "AUX\tMD"))  # MD: not a training tag
    dm = UDPOSDataModule(root=root, batch_size=2, aux_columns=["xpos", "deprel"])
    dm.setup()
    assert dm.aux_vocabs["xpos"].itos[2:] == ["RB", "VB", "VBP"]  # by count, ties by first appearance
    assert dm.aux_vocabs["deprel"].itos[2:] == ["advmod", "root", "aux"]
    batch = next(iter(dm.train_dataloader()))
    assert batch["xpos"].shape == batch["deprel"].shape == batch["tags"].shape
    val = next(iter(dm.val_dataloader()))
    assert val["xpos"][0].tolist() == [-100, 2, 3] and val["xpos"][1].tolist() == [3, 2, -100]  # MD unscored
    assert val["deprel"][0].tolist() == [4, 2, 3]
    restored = UDPOSDataModule(root=root, aux_columns=["xpos", "deprel"])
    restored.load_state_dict(dm.state_dict())
    assert restored.aux_vocabs == dm.aux_vocabs
    plain = UDPOSDataModule(root=root)
    plain.setup()
    assert "xpos" not in next(iter(plain.train_dataloader()))
    with pytest.raises(ValueError, match="3 xpos labels, more than max_aux_classes=4"):
        UDPOSDataModule(root=root, aux_columns=["xpos"], max_aux_classes=4).setup()
    with pytest.raises(ValueError, match="aux_columns must be distinct names from"):
        UDPOSDataModule(root=root, aux_columns=["lemma"])


def test_missing_data_says_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="en_ewt-ud-train.conllu not found"):
        UDPOSDataModule(root=tmp_path).prepare_data()


@pytest.mark.parametrize(
    "cut, match",
    [
        (-1, r"ends inside a sentence \(line 10: no blank line after the last sentence\)"),  # at a line end
        (-14, r"line 10: a token line has 7 tab-separated fields, CoNLL-U has 10"),  # inside a line
        (60, r"line 3: a token line has 8 tab-separated fields"),
    ],
)
def test_truncated_file_is_named_with_the_fix(tmp_path: Path, cut: int, match: str) -> None:
    root = _treebank(tmp_path)
    train = root / "ud_english_ewt" / "en_ewt-ud-train.conllu"
    train.write_text(CONLLU[:cut])
    with pytest.raises(ValueError, match=match) as info:
        UDPOSDataModule(root=root).setup()
    message = str(info.value)
    assert str(train) in message and "truncated or corrupt" in message and "download it again" in message


def test_binary_file_is_named(tmp_path: Path) -> None:
    root = _treebank(tmp_path)
    dev = root / "ud_english_ewt" / "en_ewt-ud-dev.conllu"
    dev.write_bytes(b"# sent_id = a\n\x89PNG\r\n")
    with pytest.raises(ValueError, match=r"en_ewt-ud-dev.conllu is not UTF-8 text \(bad byte at offset 14\)"):
        UDPOSDataModule(root=root).setup()


def test_bucket_sampler_covers_every_sentence_once() -> None:
    lengths = torch.randint(1, 50, (103,)).tolist()
    batches = list(BucketSampler(lengths, 8, pool=3))
    assert sorted(i for b in batches for i in b) == list(range(103))
    assert len(batches) == len(BucketSampler(lengths, 8))


@pytest.mark.data
def test_real_ewt() -> None:
    from _recipes import data_root

    dm = UDPOSDataModule(root=data_root("ud_english_ewt"))
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 12544, "val": 2001, "test": 2001}
    assert sum(dm.datasets["train"].lengths) == 204577 and sum(dm.datasets["val"].lengths) == 25147
    assert len(dm.words) <= 20000 and len(dm.chars) <= 200



def test_bucket_sampler_shares_sentences_among_ddp_processes() -> None:
    from torch.utils.data import BatchSampler, DistributedSampler

    lengths = torch.randint(1, 50, (103,)).tolist()
    assert isinstance(BucketSampler(lengths, 8), BatchSampler)  # so Lightning can swap its ``sampler``
    shares = []
    for rank in range(2):  # what Lightning builds in each of two DDP processes
        share = DistributedSampler(range(103), num_replicas=2, rank=rank, shuffle=False)
        batches = list(BucketSampler(lengths, 8, pool=3, sampler=share))
        assert len(batches) == len(BucketSampler(lengths, 8, sampler=share)) == 7  # 52 sentences (one padded)
        shares.append({i for b in batches for i in b})
    assert shares[0] | shares[1] == set(range(103))
