"""One registry contract for masks, adapters and backends (attnmm._registry): lookup, duplicate names
refused naming the holder, the same value registered again a no-op, an unknown name's error listing the
registered names (a KeyError and a ValueError both), the wrong kind refused."""

from __future__ import annotations

import pytest

from attnmm._registry import Registry, UnknownName
from attnmm.adapters import Adapter, get_adapter, list_adapters, register_adapter
from attnmm.attention.backends import Backend, get_backend, list_backends, register_backend
from attnmm.masks import Mask, get_mask, list_masks, register_mask


class _Backend(Backend):
    name = "sdpa"

    def forward(self, problem):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class _Mask(Mask):
    def mask_mod(self, b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
        return q_idx == kv_idx

    def _pairs(self, num_rows, num_cols, batch_size, device):  # type: ignore[no-untyped-def]
        raise NotImplementedError


#: kind -> (lookup, names, register a value under its name, another value of the taken name, the taken name)
REGISTRIES = {
    "mask": (get_mask, list_masks, lambda name, cls: register_mask(cls), type("Window", (_Mask,), {}), "Window"),
    "adapter": (get_adapter, list_adapters, lambda name, cls: register_adapter(name)(cls),
                type("Other", (Adapter,), {"forward": lambda self, batch: None}), "speech"),
    "backend": (get_backend, list_backends, lambda name, backend: register_backend(backend),
                type("X", (_Backend,), {})(), "sdpa"),
}


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_the_contract_of_every_registry(kind: str) -> None:
    get, names, register, another, taken = REGISTRIES[kind]
    assert names() == sorted(names()) and taken in names()
    value = get(taken)
    assert register(taken, value) is value  # the same value again: a no-op
    with pytest.raises(ValueError, match=f"named '{taken}' is already registered .*; pick another name"):
        register(taken, another)
    for error in (KeyError, ValueError):
        with pytest.raises(error, match=f"unknown {kind} 'nothing'; registered: .*'{taken}'"):
            get("nothing")
    with pytest.raises(TypeError, match="expects"):
        register("wrong", 3)


def test_registry_register_unregister_and_names() -> None:
    things: Registry[int] = Registry("thing", also=("any",))
    assert things.register("b", 2) == 2 and things.register("a", 1) == 1
    assert things.names() == ["a", "b"] and "a" in things
    with pytest.raises(UnknownName, match="unknown thing 'c'; registered: 'any', 'a', 'b'"):
        things.get("c")
    assert things.unregister("a") == 1 and things.names() == ["b"]
    with pytest.raises(ValueError, match="non-empty name"):
        things.register("", 3)
    assert str(UnknownName("plain")) == "plain"  # not quoted as a KeyError's message is


def test_the_generation_counts_changes_of_the_registered_set() -> None:
    colours: Registry[int] = Registry("colour")
    assert colours.generation == 0
    colours.register("red", 1)
    colours.register("red", 1)  # the same value again: no change
    assert colours.generation == 1
    colours.unregister("red")
    assert colours.generation == 2
