"""ABI probe for aml-hip: the HIP values, sizes and offsets the bindings use, checked
against the vendor header (one by one) and against the tables of docs/native-abi.md.

* ``abi_probe.c`` is compiled with gcc against ``hip/hip_runtime_api.h``
  (``-D__HIP_PLATFORM_AMD__``; Debian: ``libamdhip64-dev``, HIP 5.2.3) and prints every
  constant, enum value, struct size and offset of :mod:`aml_hip.abi`; each is
  compared with ``aml_hip.abi.probe_expectations(HIP_VERSION)``, and the two name
  sets must be equal.
* The 5.3 .. 7.x values (no such headers here) are checked against the tables of
  ``docs/native-abi.md#hip``, copied below with their section.
* The Debian library (``libamdhip64.so.5``) must export every function declared as
  required.

Skips (with the reason) only when the header, gcc or the library is missing; CI installs
``gcc libamdhip64-dev`` (which brings ``libamdhip64-5``).
"""

from __future__ import annotations

import ast
import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
PROBE = HERE / "abi_probe.c"

try:
    import aml_hip.abi as C
except ImportError:  # running from a checkout without aml-hip installed
    sys.path.insert(0, str(REPO / "backends" / "hip"))
    import aml_hip.abi as C

DEBIAN_HIP_VERSION = 50221153  # HIP 5.2.3 of Debian 12 (docs/native-abi.md#where-facts-were-checked)


def _include_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("AML_HIP_INCLUDE", "").split(os.pathsep) if p]
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        dirs.append(Path(rocm) / "include")
    dirs += [Path("/usr/include"), Path("/opt/rocm/include")]
    return [d for d in dirs if (d / "hip" / "hip_runtime_api.h").is_file()]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The probe's output: name -> value (HIP_VERSION included)."""
    incs = _include_dirs()
    if not incs:
        pytest.skip(
            "hip/hip_runtime_api.h not found (install Debian's libamdhip64-dev, or set AML_HIP_INCLUDE "
            "or ROCM_PATH)"
        )
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        pytest.skip("gcc is needed to compile the ABI probe (Debian: apt-get install gcc)")
    exe = tmp_path_factory.mktemp("abi") / "abi_probe"
    cmd = [
        cc,
        "-D__HIP_PLATFORM_AMD__",
        "-std=gnu11",
        "-Wall",
        "-Werror",
        f"-I{incs[0]}",
        "-o",
        str(exe),
        str(PROBE),
    ]
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stdout}{built.stderr}"
    ran = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60)
    values: dict[str, int] = {}
    for line in ran.stdout.splitlines():
        name, _, value = line.rpartition(" ")
        assert name not in values, f"the probe prints {name} twice"
        values[name] = int(value)
    return values


@pytest.fixture(scope="module")
def header_version(probe: dict[str, int]) -> int:
    return probe["HIP_VERSION"]


def test_probe_prints_exactly_what_the_bindings_use(probe: dict[str, int], header_version: int) -> None:
    printed = set(probe) - {"HIP_VERSION"}
    expected = set(C.probe_expectations(header_version))
    assert printed - expected == set(), "printed by abi_probe.c but unknown to aml_hip.abi"
    assert expected - printed == set(), "used by aml_hip.abi but not probed by abi_probe.c"


@pytest.mark.parametrize("name", sorted(C.probe_expectations(DEBIAN_HIP_VERSION)))
def test_value(probe: dict[str, int], header_version: int, name: str) -> None:
    expected = C.probe_expectations(header_version)
    if name not in expected:
        pytest.skip(f"{name} is not part of the HIP {C.version_string(header_version)} ABI")
    assert probe[name] == expected[name], f"{name}: header {probe[name]}, aml_hip.abi {expected[name]}"


def test_debian_header_is_the_5_2_abi(header_version: int) -> None:
    if header_version // 100_000 != DEBIAN_HIP_VERSION // 100_000:
        pytest.skip(f"the header is HIP {C.version_string(header_version)}, not Debian's 5.2")
    assert C.abi_for(header_version) is C.ABIS[0]
    assert C.abi_for(header_version).allocation_prop is C.hipMemAllocationProp_v5_2


# -- the bindings use nothing the probe does not check ---------------------------------------------
def _module_constants() -> set[str]:
    tree = ast.parse(Path(C.__file__).read_text())
    names: set[str] = set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and re.match(r"^(hip|HIP_)", target.id):
            names.add(target.id)
    return names


def test_every_constant_is_probed() -> None:
    assert _module_constants() == set(C.COMMON_NAMES)


def test_bindings_use_only_checked_constants() -> None:
    """Every ``C.<name>`` in the bindings is a probed constant or a checked ABI object."""
    allowed = set(C.COMMON_NAMES) | set(C.__all__) | {"NEWEST_KNOWN_MAJOR"}
    package = Path(C.__file__).parent
    used: set[str] = set()
    for path in package.glob("*.py"):
        if path.name == "abi.py":
            continue
        used |= set(re.findall(r"\bC\.([A-Za-z_][A-Za-z0-9_]*)", path.read_text()))
    assert used, "the bindings are expected to take their numbers from aml_hip.abi as C"
    assert used - allowed == set()


# -- 5.3 .. 7.x: the tables of docs/native-abi.md (no headers here) ----------------------------------
def test_struct_layouts_match_the_reference() -> None:
    """docs/native-abi.md#hip-virtual-memory (hipMemLocation 8 B, hipMemAccessDesc 12 B, flags @8;
    hipMemAllocationProp both layouts, 32 B), #hip-pointer-attributes (32 B), #hip-ipc (64 B)."""
    reference = {
        "hipMemLocation": {"sizeof": 8, "type": 0, "id": 4},
        "hipMemAccessDesc": {"sizeof": 12, "location": 0, "flags": 8},
        "hipIpcMemHandle_t": {"sizeof": 64, "reserved": 0},
        "hipPointerAttribute_t": {
            "sizeof": 32,
            "type": 0,
            "device": 4,
            "devicePointer": 8,
            "hostPointer": 16,
            "isManaged": 24,
            "allocationFlags": 28,
        },
        "hipMemAllocationProp_v5_2": {
            "sizeof": 32,
            "compressionType": 0,
            "location": 4,
            "requestedHandleType": 12,
            "type": 16,
            "usage": 20,
            "win32HandleMetaData": 24,
        },
        "hipMemAllocationProp_v5_3": {
            "sizeof": 32,
            "type": 0,
            "requestedHandleType": 4,
            "location": 8,
            "win32HandleMetaData": 16,
            "allocFlags": 24,
            "allocFlags.compressionType": 24,
            "allocFlags.gpuDirectRDMACapable": 25,
            "allocFlags.usage": 26,
        },
    }
    assert {k: dict(v) for k, v in C.REFERENCE_LAYOUTS.items()} == reference
    for name in C.STRUCTS:
        assert C.struct_layout(name) == reference[name], name


V = C.hip_version
P52, P53 = "hipMemAllocationProp_v5_2", "hipMemAllocationProp_v5_3"


@pytest.mark.parametrize(
    ("version", "label", "lazy", "prop", "shareable", "host_alloc", "host_free", "vmm_attr"),
    [
        # docs/native-abi.md#hip-version-differences: lazy flag, prop layout, shareable handles,
        # hipExtHostAlloc / hipFreeHost from 6.3, attribute 89 from 6.0.
        (V(5, 2, 21153), "5.2", 0, P52, "pointer", "hipHostMalloc", "hipHostFree", None),
        (V(5, 7, 1), "5.3-5.7", 0, P53, "pointer", "hipHostMalloc", "hipHostFree", None),
        (V(6, 0), "6.0/6.1", 1, P53, "unsupported", "hipHostMalloc", "hipHostFree", 89),
        (V(6, 1, 40093), "6.0/6.1", 1, P53, "unsupported", "hipHostMalloc", "hipHostFree", 89),
        (V(6, 2, 41133), "6.2", 1, P53, "pointer", "hipHostMalloc", "hipHostFree", 89),
        (V(6, 3), "6.3+", 1, P53, "pointer", "hipExtHostAlloc", "hipFreeHost", 89),
        (V(6, 4, 1), "6.3+", 1, P53, "pointer", "hipExtHostAlloc", "hipFreeHost", 89),
        (V(7, 0), "7.x", 1, P53, "value", "hipExtHostAlloc", "hipFreeHost", 89),
        (V(7, 1, 5), "7.x", 1, P53, "value", "hipExtHostAlloc", "hipFreeHost", 89),
    ],
)
def test_version_table(
    version: int,
    label: str,
    lazy: int,
    prop: str,
    shareable: str,
    host_alloc: str,
    host_free: str,
    vmm_attr: int | None,
) -> None:
    abi = C.abi_for(version)
    assert abi.label == label
    assert abi.ipc_lazy_enable_peer_access == lazy
    assert abi.allocation_prop.__name__ == prop
    assert abi.shareable == shareable
    assert (abi.host_alloc, abi.host_free) == (host_alloc, host_free)
    assert abi.attr_vmm_supported == vmm_attr


@pytest.mark.parametrize(
    ("version", "types"),
    [
        # docs/native-abi.md#hip-pointer-attributes hipMemoryType table
        (V(5, 2), {"Host": 0, "Device": 1, "Array": 2, "Unified": 3}),
        (V(5, 5), {"Host": 0, "Device": 1, "Array": 2, "Unified": 3, "Managed": 4}),
        (V(6, 0), {"Unregistered": 0, "Host": 1, "Device": 2, "Managed": 3, "Array": 10, "Unified": 11}),
        (V(7, 0), {"Unregistered": 0, "Host": 1, "Device": 2, "Managed": 3, "Array": 10, "Unified": 11}),
    ],
)
def test_memory_type_numbering(version: int, types: dict[str, int]) -> None:
    abi = C.abi_for(version)
    assert dict(abi.memory_types) == {f"hipMemoryType{k}": v for k, v in types.items()}
    for name, value in types.items():
        assert abi.memory_kind(value) == name.lower()
    assert abi.memory_kind(12345) is None
    assert abi.pointer_type_field == ("type" if version >= V(6, 0) else "memoryType")


# -- the library ------------------------------------------------------------------------------------
#: Where Debian's libamdhip64-5 installs the library (by path: a test double with the
#: same soname may already be loaded in this process, and other machines may carry
#: another HIP 5.x under that name).
DEBIAN_LIBRARY = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"


@pytest.fixture(scope="module")
def debian_library() -> ctypes.CDLL:
    if not Path("/usr/share/doc/libamdhip64-5").is_dir():
        pytest.skip("Debian's libamdhip64-5 package is not installed (apt-get install libamdhip64-5)")
    try:
        library = ctypes.CDLL(DEBIAN_LIBRARY)
    except OSError as exc:
        pytest.skip(f"Debian's libamdhip64.so.5 is not installed (apt-get install libamdhip64-5): {exc}")
    version = ctypes.c_int(0)
    library.hipRuntimeGetVersion(ctypes.byref(version))
    if version.value // 100000 != DEBIAN_HIP_VERSION // 100000:
        # Another distribution's libamdhip64-5 (Ubuntu 24.04 ships HIP 5.7 under that name).
        pytest.skip(f"{DEBIAN_LIBRARY} is HIP {version.value}, not Debian 12's {DEBIAN_HIP_VERSION}")
    return library


def test_debian_library_exports_every_required_function(debian_library: ctypes.CDLL) -> None:
    from aml_hip.native import OPTIONAL, REQUIRED

    missing = [name for name in REQUIRED if not hasattr(debian_library, name)]
    assert missing == []
    optional = {name for name in OPTIONAL if hasattr(debian_library, name)}
    # 5.2 has virtual memory and hipFreeHost, not hipExtHostAlloc (6.3+; native-abi.md#hip-functions-declared)
    assert optional == set(OPTIONAL) - {"hipExtHostAlloc"}


def test_debian_library_version(debian_library: ctypes.CDLL) -> None:
    version = ctypes.c_int(0)
    assert debian_library.hipRuntimeGetVersion(ctypes.byref(version)) == 0
    assert version.value == DEBIAN_HIP_VERSION  # docs/native-abi.md#hip-without-a-device
    assert C.abi_for(version.value).label == "5.2"
