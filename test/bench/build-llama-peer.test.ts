// The llama.cpp peer build's flags: ISA options only for what the CPU reports, never AMX (some VMs
// report it and trap its instructions), never -march=native; the cache key follows the flags.
import { expect } from "chai";
// @ts-expect-error: a plain .mjs script without type declarations
import { isaFlags, peerPlan } from "../../scripts/build-llama-peer.mjs";

const cpuinfo = (flags: string) => `processor\t: 0\nflags\t\t: ${flags}\n\nprocessor\t: 1\nflags\t\t: ${flags}\n`;

describe("build-llama-peer", () => {
  it("turns on what the CPU reports and keeps AMX and native off", () => {
    const f: string[] = isaFlags(cpuinfo("fpu sse avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_tile amx_int8 amx_bf16"));
    expect(f).to.include.members(["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]);
    expect(f).to.include.members(["-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_FMA=ON"]);
    expect(f.filter((x) => /AMX.*=ON|NATIVE=ON/.test(x))).to.deep.equal([]);
  });

  it("leaves out the sets an AVX2-only CPU lacks", () => {
    const f: string[] = isaFlags(cpuinfo("fpu sse avx avx2 fma f16c"));
    expect(f).to.include("-DGGML_AVX2=ON");
    expect(f.some((x) => x.startsWith("-DGGML_AVX512"))).to.equal(false);
    expect(f.includes("-DGGML_BMI2=ON")).to.equal(false);
  });

  it("builds the oracle's commit from node-llama-cpp's bundle, cached under a key of commit and flags", () => {
    const p = peerPlan();
    expect(p.bundle).to.match(/node-llama-cpp\/llama\/gitRelease\.bundle$/);
    expect(p.commit).to.match(/^[0-9a-f]{40}$/);
    expect(p.flags).to.include("-DGGML_NATIVE=OFF");
    expect(p.dir.endsWith(p.key)).to.equal(true);
  });
});
