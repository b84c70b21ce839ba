"""TurnSlots: the process-wide limit on sessions executing work, FIFO among waiters."""

from __future__ import annotations

from actors.slots import TurnSlots


def test_try_take_takes_a_free_slot_at_once_but_never_ahead_of_a_waiter() -> None:
    granted: list[str] = []
    slots = TurnSlots(2, granted.append)
    assert slots.try_take("a") and slots.try_take("a")  # holding it already: still True
    assert slots.try_take("b")
    assert not slots.try_take("c")  # full: queued instead
    assert slots.waiting == 1 and granted == []
    slots.release("a")
    assert granted == ["c"]  # the waiter got the freed slot
    slots.release("b")
    slots.request("d")
    assert granted == ["c", "d"]
    slots.release("c")
    slots.request("e")  # nobody waiting ahead, a slot is free: e is granted
    assert granted == ["c", "d", "e"] and slots.running == 2
    assert not slots.try_take("f")  # full again
    assert not slots.try_take("g")
    slots.release("d")
    assert granted[-1] == "f"  # first come, first served, try_take or request alike
    assert slots.peak == 2
