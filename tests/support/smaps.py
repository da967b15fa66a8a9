"""Reading one mapping's entry of ``/proc/self/smaps``: the tests' and the NUMA
benchmark's one walk of that file (a field of the mapping that holds an address)."""

from __future__ import annotations

__all__ = ["anon_huge_kib", "mapping_field", "vm_flags"]


def mapping_field(ptr: int, field: str) -> list[str] | None:
    """The words after ``field:`` (``"VmFlags"``, ``"AnonHugePages"``...) in the entry of
    the mapping holding ``ptr``; None where no mapping holds it or its entry lacks the field."""
    inside = False
    key = field + ":"
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= ptr < high
            elif inside and head == key:
                return line.split()[1:]
    return None


def vm_flags(ptr: int) -> list[str]:
    """The VmFlags of the mapping holding ``ptr``; AssertionError where no mapping holds it."""
    flags = mapping_field(ptr, "VmFlags")
    if flags is None:
        raise AssertionError(f"0x{ptr:x} is in no mapping")
    return flags


def anon_huge_kib(ptr: int) -> int:
    """``AnonHugePages`` of the mapping holding ``ptr``, in KiB (0 where none is counted)."""
    words = mapping_field(ptr, "AnonHugePages")
    return int(words[0]) if words else 0
