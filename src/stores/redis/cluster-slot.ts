/**
 * The Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key's bytes, or of its hash tag
 * (the part between the first `{` and the next `}`, when not empty), modulo 16384. The batch of a
 * turn's checks is split by it on a cluster: keys of one slot can share one script call.
 */

const SLOTS = 16_384;

/** CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), one entry per byte value. */
const TABLE = new Uint16Array(256);
for (let byte = 0; byte < 256; byte++) {
  let crc = byte << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
  TABLE[byte] = crc & 0xffff;
}

function crc16(bytes: Uint8Array | string, from: number, to: number): number {
  let crc = 0;
  for (let i = from; i < to; i++) {
    const byte = typeof bytes === 'string' ? bytes.charCodeAt(i) : bytes[i];
    crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff];
  }
  return crc;
}

/** The part of `bytes` Redis hashes: the hash tag when there is a non-empty one, else all of it. */
function hashedRange(bytes: Uint8Array | string): [number, number] {
  const length = bytes.length;
  const at = (i: number): number => (typeof bytes === 'string' ? bytes.charCodeAt(i) : bytes[i]);
  for (let open = 0; open < length; open++) {
    if (at(open) !== 0x7b) continue; // {
    for (let close = open + 1; close < length; close++) {
      if (at(close) === 0x7d) return close > open + 1 ? [open + 1, close] : [0, length]; // }
    }
    return [0, length];
  }
  return [0, length];
}

/** The cluster slot of `key`. */
export function slotOf(key: string): number {
  // Hashed as UTF-8, as Redis sees it; an ASCII key is its own bytes.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the ASCII range is the point.
  const bytes: Uint8Array | string = /^[\u0000-\u007f]*$/.test(key) ? key : Buffer.from(key, 'utf8');
  const [from, to] = hashedRange(bytes);
  return crc16(bytes, from, to) % SLOTS;
}
