-- The whole result of an MCP upstream (content items of every type,
-- structuredContent, isError, _meta) beside the structured result, so that
-- a repeat over MCP gets what the first call got. NULL for other upstreams.
ALTER TABLE airlock_records ADD COLUMN content TEXT;
