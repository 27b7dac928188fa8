// opledger serve for the tests: built once from the repository (or taken
// from $OPLEDGER_SERVE_BIN), started on free loopback ports with a SQLite
// file of the test's own, and read through that file.

import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import type { Interceptor } from "@connectrpc/connect";

/** The repository's root, from dist/test/ or test/. */
export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

let built: Promise<string> | undefined;

/** The opledger binary: $OPLEDGER_SERVE_BIN, else built once (go build ./cmd/opledger). */
export function opledgerBinary(): Promise<string> {
  const given = process.env["OPLEDGER_SERVE_BIN"];
  if (given !== undefined && given !== "") {
    return Promise.resolve(given);
  }
  built ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), "opledger-connect-es-bin-"));
    const bin = join(dir, "opledger");
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    await promisify(execFile)("go", ["build", "-o", bin, "./cmd/opledger"], { cwd: repoRoot, timeout: 600_000 });
    return bin;
  })();
  return built;
}

/** A running opledger serve. */
export interface Serve {
  /** gRPC (grpc-go), as a base URL: http://HOST:PORT. */
  readonly grpc: string;
  /** connect-go's port: Connect, gRPC-Web and gRPC. */
  readonly connect: string;
  /** The bearer token. */
  readonly token: string;
  /** The SQLite file of the ledger and the transfers. */
  readonly db: string;
  /** An interceptor that sends the token. */
  readonly auth: Interceptor;
  /** The transfers' rows: reference → ids. */
  transfers(): Map<string, bigint[]>;
  /** Stops serve and removes its files. */
  stop(): Promise<void>;
}

/** Starts opledger serve with extra flags (such as --faults 0.1). */
export async function startServe(...flags: string[]): Promise<Serve> {
  const bin = await opledgerBinary();
  const dir = mkdtempSync(join(tmpdir(), "opledger-connect-es-"));
  const db = join(dir, "serve.db");
  const child: ChildProcess = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--dsn", "sqlite:" + db, "--grace", "2s", ...flags], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const first = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error("opledger serve printed no endpoints within 60s: " + stderr)), 60_000);
    rl.once("line", (l) => {
      clearTimeout(timer);
      rl.on("line", () => {}); // keep draining stdout
      resolve(l);
    });
    child.once("exit", (code) => reject(new Error(`opledger serve exited (${String(code)}): ${stderr}`)));
  });
  const kv = new Map(first.split(" ").map((p) => p.split("=", 2) as [string, string]));
  const token = readFileSync(kv.get("token-file")!, "utf8").trim();
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", "Bearer " + token);
    return next(req);
  };
  return {
    grpc: "http://" + kv.get("grpc")!,
    connect: kv.get("connect")!,
    token,
    db,
    auth,
    transfers() {
      const out = execFileSync("sqlite3", ["-readonly", "-cmd", ".timeout 10000", db, "SELECT reference, id FROM payments_transfers ORDER BY id"], {
        encoding: "utf8",
      });
      const m = new Map<string, bigint[]>();
      for (const line of out.split("\n")) {
        if (line === "") {
          continue;
        }
        const [ref, id] = line.split("|") as [string, string];
        m.set(ref, [...(m.get(ref) ?? []), BigInt(id)]);
      }
      return m;
    },
    async stop() {
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs f on 0..n-1, at most width at a time. */
export async function pool(n: number, width: number, f: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) {
        await f(next++);
      }
    }),
  );
}
