// A Vercel AI SDK tool whose work runs once per piece of work, however often
// the model (or a retry of the request) calls it.
import { tool } from "ai";
import { z } from "zod";
import { Client } from "../src/index.js";

export function saveNoteTool(client: Client, save: (recordId: string, text: string) => Promise<unknown>) {
  return tool({
    description: "Add a note to a withdrawal record.",
    inputSchema: z.object({ record_id: z.string(), text: z.string() }),
    // airlock's answer is what the model sees: the first result, marked as a repeat.
    execute: client.guarded("save_note", ({ record_id, text }: { record_id: string; text: string }) => save(record_id, text)),
  });
}
