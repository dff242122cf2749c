// A process that guards a function appending its pid to a file.
import { appendFileSync } from "node:fs";
import { Client } from "../dist/src/index.js";

const client = new Client({ url: process.env.URL, token: process.env.TOKEN });
const saveNote = client.guarded("save_note", async () => {
  appendFileSync(process.env.LOG, `${process.pid}\n`);
  await new Promise((r) => setTimeout(r, Number(process.env.WORK_MS ?? 0)));
  return { note: `N-${process.pid}` };
});
const answer = await saveNote({ record_id: process.env.RECORD, text: "x" });
console.log(answer.status);
