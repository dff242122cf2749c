// A worker process whose handler tells its service (a ledger file) the
// work's key, then takes a minute: it is killed in the middle.
import { appendFileSync } from "node:fs";
import { Client } from "../dist/src/index.js";

const client = new Client({ url: process.env.URL, token: process.env.TOKEN });
await client
  .worker({
    [process.env.TOOL]: async (_args, work) => {
      appendFileSync(process.env.LEDGER, `${work.idempotencyKey}\n`);
      await new Promise((r) => setTimeout(r, 60000));
    },
  })
  .runOnce(20);
