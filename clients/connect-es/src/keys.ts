// Keys that carry their birth: UUIDv7 (RFC 9562), as the Go kit's
// keyed.NewKey and internal/keybirth make and read them.

const hex = "0123456789abcdef";

function format(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) {
      s += "-";
    }
    s += hex[b[i]! >> 4]! + hex[b[i]! & 15]!;
  }
  return s;
}

function stamp(b: Uint8Array, ms: number): void {
  // 48 bits of Unix milliseconds, big-endian, then the version and variant.
  let t = Math.floor(ms);
  for (let i = 5; i >= 0; i--) {
    b[i] = t % 256;
    t = Math.floor(t / 256);
  }
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
}

/**
 * Returns a fresh idempotency key that carries its birth: a UUID of version
 * 7 (RFC 9562) in its 36-character lower-case form, 48 bits of Unix
 * milliseconds and 74 random bits (from `crypto.getRandomValues`), as the Go
 * kit's `keyed.NewKey`. The server reads its birth and refuses a retry once
 * the key is older than its window instead of running the call again.
 *
 * @param now - the key's birth; default the current time.
 */
export function newKey(now: Date = new Date()): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b.subarray(6));
  stamp(b, now.getTime());
  return format(b);
}

/**
 * Returns the birth a key carries, or `undefined` when it carries none: the
 * key must be a UUID of version 7 and the RFC 9562 variant in its
 * 36-character form (hex digits of either case), with a time after the Unix
 * epoch, exactly as the Go kit reads it.
 */
export function keyBirth(key: string): Date | undefined {
  if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-7[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/.test(key)) {
    return undefined;
  }
  const ms = parseInt(key.slice(0, 8) + key.slice(9, 13), 16);
  return ms > 0 ? new Date(ms) : undefined;
}

const base32 = "abcdefghijklmnopqrstuvwxyz234567";

function encodeBase32(b: Uint8Array): string {
  let out = "";
  let acc = 0;
  let bits = 0;
  for (const x of b) {
    acc = (acc << 8) | x;
    bits += 8;
    while (bits >= 5) {
      out += base32[(acc >>> (bits - 5)) & 31]!;
      bits -= 5;
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) {
    out += base32[(acc << (5 - bits)) & 31]!;
  }
  return out;
}

/** The prefix of a derived key whose upstream key carries no birth (the Go kit's). */
const derivedKeyPrefix = "dk1-";

/**
 * Returns the idempotency key of a call made on behalf of the keyed call
 * whose key is `upstreamKey`, as the step `step` of it ("charge",
 * "fraud-check"): the same for the same two inputs, on every retry and in
 * every process, and different across keys and steps. When the upstream key
 * carries its birth, the derived key is a UUIDv7 with the same birth, so the
 * downstream server's window counts from the logical call's first send;
 * otherwise it is `dk1-` and 52 base32 characters, as the Go kit's derived
 * keys without a birth. Give each downstream call of one operation its own
 * step, and send the key with {@link withKey}.
 *
 * The Go kit's `keyed.DownstreamKey` derives from the server's whole
 * operation identity (caller, method and key); this function, on the
 * client, from the key alone: use it where the key is the caller's.
 *
 * @throws TypeError when a name is empty or longer than 512 bytes.
 */
export async function downstreamKey(upstreamKey: string, step: string): Promise<string> {
  const enc = new TextEncoder();
  const parts = [enc.encode("downstream-key"), enc.encode(upstreamKey), enc.encode(step)];
  for (const p of parts.slice(1)) {
    if (p.length === 0 || p.length > 512) {
      throw new TypeError("downstreamKey: the key and the step must be 1 to 512 bytes");
    }
  }
  const prefix = enc.encode("opledger/derive/v1\x00");
  const total = prefix.length + parts.reduce((n, p) => n + 8 + p.length, 0);
  const buf = new Uint8Array(total);
  const view = new DataView(buf.buffer);
  buf.set(prefix, 0);
  let off = prefix.length;
  for (const p of parts) {
    view.setBigUint64(off, BigInt(p.length));
    off += 8;
    buf.set(p, off);
    off += p.length;
  }
  const d = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", buf));
  const birth = keyBirth(upstreamKey);
  if (birth === undefined) {
    return derivedKeyPrefix + encodeBase32(d);
  }
  const b = d.slice(0, 16);
  stamp(b, birth.getTime());
  return format(b);
}

const days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/**
 * formatFirstSent formats t as an IMF-fixdate (RFC 9110), the first-sent
 * header's value: 29 bytes, to the second.
 */
export function formatFirstSent(t: Date): string {
  const p = (n: number): string => String(n).padStart(2, "0");
  return `${days[t.getUTCDay()]!}, ${p(t.getUTCDate())} ${months[t.getUTCMonth()]!} ${String(t.getUTCFullYear()).padStart(4, "0")} ${p(t.getUTCHours())}:${p(t.getUTCMinutes())}:${p(t.getUTCSeconds())} GMT`;
}
