"""Which of llama.cpp's CPU code paths a model may use on this machine.

llama.cpp can move a model's weights into "extra" buffer types when it loads
them: the AMX buffer on Intel CPUs with Advanced Matrix Extensions (Sapphire
Rapids and later, common on cloud machines), and the CPU "repack" buffer
(weights interleaved for the CPU's SIMD width) everywhere else. On an AMX
CPU, with a llama.cpp built for it (pip builds llama-cpp-python for the CPU
it runs on), the AMX kernels crash with SIGSEGV at the first embedding of a
Q4_0 model: every command that embeds died. So the extra buffers are off
where AMX is both in the CPU and in the build, and on elsewhere (repack makes
embedding faster on AVX2, AVX-512 and ARM; docs/models.md has the figures).

The decision is made here from the CPU's own flags (``/proc/cpuinfo``), and
the build's features (``llama_print_system_info``), so that it can be tested
on recorded flag sets; ``MARCH_LLAMA_EXTRA_BUFFERS`` (``on`` / ``off``)
overrides it. Whatever the decision, the first use of a model on a machine is
proven in a child process (``nativecheck``), which catches what no rule here
foresees.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

#: CPU flags (Linux names) of Intel's Advanced Matrix Extensions.
AMX_FLAGS = frozenset({"amx_int8", "amx_tile", "amx_bf16", "amx_fp16"})
#: The environment variable that overrides the decision: ``on`` or ``off``.
OVERRIDE_ENV = "MARCH_LLAMA_EXTRA_BUFFERS"
_ON = ("on", "1", "true", "yes")
_OFF = ("off", "0", "false", "no")


@dataclass(frozen=True)
class Cpu:
    """What marchdb knows of the processor: its model name, its machine
    architecture and its feature flags (x86 ``flags``, ARM ``Features``)."""

    model: str
    arch: str
    flags: frozenset[str]

    def fingerprint(self) -> str:
        """A short hash of the model name and flags: a verdict proven on one
        CPU is not trusted on another."""
        text = "\n".join([self.model, self.arch, " ".join(sorted(self.flags))])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def simd(self) -> str:
        """The widest vector extension, for a person to read: ``AMX``,
        ``AVX-512``, ``AVX2``, ``NEON``, ``SVE`` or ``baseline``."""
        if self.flags & AMX_FLAGS:
            return "AMX"
        for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("sve", "SVE"), ("asimd", "NEON")):
            if flag in self.flags:
                return name
        return "baseline"


def parse_cpuinfo(text: str, arch: str = "") -> Cpu:
    """A ``Cpu`` from the text of ``/proc/cpuinfo`` (the first processor's
    block is enough: Linux lists the same flags for every core)."""
    model = ""
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if flags and not line.strip():
                break  # end of the first processor's block
            continue
        key = key.strip().lower()
        if key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
        elif key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key == "cpu part" and not model:
            model = f"ARM part {value.strip()}"
    return Cpu(model=model or "unknown", arch=arch or platform.machine(), flags=flags)


def read_cpu(path: str = "/proc/cpuinfo") -> Cpu:
    """This machine's CPU; flags are empty where ``/proc/cpuinfo`` is not
    readable (not Linux), so that only the build's features decide."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return Cpu(model=platform.processor() or "unknown", arch=platform.machine(), flags=frozenset())
    return parse_cpuinfo(text)


def parse_build_features(system_info: str) -> dict[str, bool]:
    """The features a llama.cpp build was compiled with, from
    ``llama_print_system_info()`` (``CPU : AVX2 = 1 | AMX_INT8 = 1 | ...``)."""
    out: dict[str, bool] = {}
    for part in system_info.replace("\n", "|").split("|"):
        name, sep, value = part.rpartition("=")
        if sep:
            name = name.split(":")[-1].strip().upper()
            if name:
                out[name] = value.strip() == "1"
    return out


@dataclass(frozen=True)
class Decision:
    """Whether llama.cpp may use its extra buffer types, and why, in words a user can read."""

    use_extra_buffers: bool
    reason: str


def decide_extra_buffers(cpu: Cpu, build: Mapping[str, bool] | None, env: Mapping[str, str]) -> Decision:
    """The extra-buffer decision for ``cpu`` and a llama.cpp build with the
    features ``build`` (None: not known, taken as able to use what the CPU has)."""
    value = env.get(OVERRIDE_ENV, "").strip().lower()
    if value in _ON:
        return Decision(True, f"extra buffers on ({OVERRIDE_ENV}={value})")
    if value in _OFF:
        return Decision(False, f"extra buffers off ({OVERRIDE_ENV}={value})")
    amx_cpu = sorted(cpu.flags & AMX_FLAGS)
    amx_build = build is None or build.get("AMX_INT8", False)
    if not cpu.flags and build is not None and build.get("AMX_INT8", False):
        # Flags unreadable, and a build compiled for AMX (pip compiles for the
        # CPU it runs on): the CPU most likely has it.
        amx_cpu = ["amx_int8 (from the build)"]
    if amx_cpu and amx_build:
        return Decision(
            False,
            f"extra buffers off: llama.cpp's AMX kernels crash on this CPU ({', '.join(amx_cpu)}); "
            "weights stay in plain CPU buffers",
        )
    if amx_cpu:
        return Decision(True, "extra buffers on: repacked weights (this llama.cpp build has no AMX kernels)")
    return Decision(True, f"extra buffers on: repacked weights for {cpu.simd()}")


def current_decision(env: Mapping[str, str] | None = None, system_info: str | None = None) -> Decision:
    """The decision on this machine. ``system_info`` is llama.cpp's
    ``llama_print_system_info()`` when the caller has llama_cpp loaded."""
    build = parse_build_features(system_info) if system_info else None
    return decide_extra_buffers(read_cpu(), build, os.environ if env is None else env)
