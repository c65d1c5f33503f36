"""The extra-buffer decision on recorded CPUs (CI's own CPU may lack AMX).

Each flag set below was read off ``/proc/cpuinfo`` of such a machine; the
decision must keep llama.cpp off its AMX kernels wherever the CPU and the
build both have them, and leave the repack path on everywhere else."""

from __future__ import annotations

import pytest

from marchdb.embedding import cpu

SAPPHIRE_RAPIDS = """\
processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Processor
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ss ht syscall nx lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor bmi1 avx2 bmi2 avx512f avx512dq avx512ifma avx512cd sha_ni avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes avx512_vnni avx512_bitalg avx512_vpopcntdq amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities

processor	: 1
flags		: fpu
"""
ICE_LAKE = """\
processor	: 0
model name	: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags		: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512vbmi avx512_vbmi2 gfni vaes
"""
ZEN2 = """\
processor	: 0
model name	: AMD EPYC 7R32
flags		: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi1 bmi2 sha_ni clwb
"""
GRAVITON2 = """\
processor	: 0
BogoMIPS	: 243.75
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU part	: 0xd0c
"""
BUILD_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | OPENMP = 1 | REPACK = 1 | "
BUILD_AVX2 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | OPENMP = 1 | REPACK = 1 | "


def test_cpuinfo_is_read_from_the_first_processor_block():
    c = cpu.parse_cpuinfo(SAPPHIRE_RAPIDS, arch="x86_64")
    assert c.model == "Intel(R) Xeon(R) Processor"
    assert {"amx_int8", "amx_tile", "avx512f"} <= c.flags
    assert c.flags != {"fpu"}
    assert c.simd() == "AMX"
    arm = cpu.parse_cpuinfo(GRAVITON2, arch="aarch64")
    assert "asimd" in arm.flags and arm.simd() == "NEON" and arm.model == "ARM part 0xd0c"


def test_build_features_are_parsed():
    assert cpu.parse_build_features(BUILD_AMX)["AMX_INT8"] is True
    assert "AMX_INT8" not in cpu.parse_build_features(BUILD_AVX2)
    assert cpu.parse_build_features(BUILD_AVX2)["AVX2"] is True


@pytest.mark.parametrize(
    ("cpuinfo", "build", "use", "words"),
    [
        (SAPPHIRE_RAPIDS, BUILD_AMX, False, "AMX kernels crash"),
        (SAPPHIRE_RAPIDS, None, False, "AMX kernels crash"),  # build unknown: assume the worst
        (SAPPHIRE_RAPIDS, BUILD_AVX2, True, "no AMX kernels"),
        (ICE_LAKE, BUILD_AMX, True, "AVX-512"),
        (ZEN2, BUILD_AVX2, True, "AVX2"),
        (GRAVITON2, "CPU : NEON = 1 | ARM_FMA = 1 | REPACK = 1 |", True, "NEON"),
    ],
)
def test_extra_buffers_are_off_only_where_amx_would_run(cpuinfo, build, use, words):
    features = cpu.parse_build_features(build) if build else None
    decision = cpu.decide_extra_buffers(cpu.parse_cpuinfo(cpuinfo), features, env={})
    assert decision.use_extra_buffers is use
    assert words in decision.reason


def test_the_user_can_override_the_decision():
    amx = cpu.parse_cpuinfo(SAPPHIRE_RAPIDS)
    on = cpu.decide_extra_buffers(amx, None, env={cpu.OVERRIDE_ENV: "on"})
    assert on.use_extra_buffers and cpu.OVERRIDE_ENV in on.reason
    off = cpu.decide_extra_buffers(cpu.parse_cpuinfo(ZEN2), None, env={cpu.OVERRIDE_ENV: "off"})
    assert not off.use_extra_buffers


def test_fingerprint_tells_cpus_apart():
    a, b = cpu.parse_cpuinfo(SAPPHIRE_RAPIDS), cpu.parse_cpuinfo(ICE_LAKE)
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == cpu.parse_cpuinfo(SAPPHIRE_RAPIDS).fingerprint()


def test_unreadable_cpuinfo_leaves_the_build_to_decide(tmp_path):
    c = cpu.read_cpu(str(tmp_path / "missing"))
    assert c.flags == frozenset()
    # pip compiles llama.cpp for the CPU it runs on: a build with AMX kernels means an AMX CPU
    assert not cpu.decide_extra_buffers(c, cpu.parse_build_features(BUILD_AMX), env={}).use_extra_buffers
    assert cpu.decide_extra_buffers(c, cpu.parse_build_features(BUILD_AVX2), env={}).use_extra_buffers
