"""Coverage-guided fuzzing of one target with atheris (libFuzzer), bounded in time:
``python -m tests.fuzz.atheris_run TARGET SECONDS WORKDIR``. Reads the target's corpus
in the repository (tests/fuzz/corpus/TARGET, never written) and writes new inputs and any
crash into WORKDIR. A non-AML exception is a crash: libFuzzer stops and exits non-zero,
the input saved in WORKDIR. The final stats (executions) go to stderr."""

from __future__ import annotations

import os
import sys

import atheris

with atheris.instrument_imports(include=["aml_core"]):
    import aml_core  # noqa: F401 - instrumented for coverage
    from tests.fuzz import targets


def main() -> None:
    name, seconds, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    target = targets.TARGETS[name]
    new = os.path.join(work, "corpus")
    os.makedirs(new, exist_ok=True)

    def one(data: bytes) -> None:
        targets.run(name, data)

    del target
    args = [
        sys.argv[0],
        f"-max_total_time={seconds}",
        "-timeout=10",
        "-rss_limit_mb=4096",
        "-max_len=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={work}/",
        new,
        os.path.join(targets.CORPUS, name),
    ]
    atheris.Setup(args, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
