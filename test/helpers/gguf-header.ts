// Reading a GGUF v3 header in tests, to make broken copies of a fixture by changing a few header
// bytes in place (same lengths, so every offset stays valid).

export interface TensorInfo {
  name: string;
  nameAt: number; // byte offset of the name's first byte
  ne: bigint[];
  neAt: number; // byte offset of ne[0]
  type: number;
  typeAt: number;
}

/** The tensor infos of a GGUF v3 file and where its header ends. */
export function readHeader(b: Buffer): { tensors: TensorInfo[]; end: number } {
  let p = 0;
  const u32 = () => { const v = b.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = b.readBigUInt64LE(p); p += 8; return v; };
  const str = () => { const n = Number(u64()); const s = b.toString("utf8", p, p + n); p += n; return s; };
  const SIZES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const skipValue = (type: number): void => {
    if (type === 8) str();
    else if (type === 9) {
      const sub = u32();
      const n = Number(u64());
      for (let i = 0; i < n; i++) skipValue(sub);
    } else if (SIZES[type] !== undefined) p += SIZES[type]!;
    else throw new Error(`gguf value type ${type}`);
  };
  if (u32() !== 0x46554747) throw new Error("not a GGUF file");
  u32();
  const nTensors = Number(u64());
  const nKv = Number(u64());
  for (let i = 0; i < nKv; i++) {
    str();
    skipValue(u32());
  }
  const tensors: TensorInfo[] = [];
  for (let i = 0; i < nTensors; i++) {
    const nameAt = p + 8;
    const name = str();
    const nDims = u32();
    const neAt = p;
    const ne = Array.from({ length: nDims }, () => u64());
    const typeAt = p;
    const type = u32();
    u64();
    tensors.push({ name, nameAt, ne, neAt, type, typeAt });
  }
  return { tensors, end: p };
}
