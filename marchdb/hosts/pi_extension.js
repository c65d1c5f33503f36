// marchdb for pi: passive recall in the model's context.
//
// - the profiles are added to the system prompt of each turn (before_agent_start);
// - each prompt's [recall] block arrives as a hidden message right after the prompt;
// - after a tool, at most 2 hints for the assistant's words of the turn are added to that tool's
//   result; the reply that ends the run is recorded; a compaction starts the session's window afresh.

export default function marchdb(pi) {
  let profiles = "";
  let latest = null; // the assistant's latest message of the run, and whether it was steered
  const sessionOf = (ctx) => {
    try {
      return ctx.sessionManager.getSessionId() || "unknown";
    } catch {
      return "unknown";
    }
  };
  const said = (ctx, name, fields) =>
    ask({ hook_event_name: name, session_id: sessionOf(ctx), cwd: ctx.cwd || process.cwd(), ...fields });

  pi.on("session_start", async (event, ctx) => {
    const source = { startup: "startup", new: "startup", resume: "resume", fork: "resume", reload: "resume" };
    profiles = await said(ctx, "SessionStart", { source: source[event && event.reason] || "startup" });
  });

  pi.on("before_agent_start", async (event, ctx) => {
    latest = null;
    const out = {};
    const block = event.prompt ? await said(ctx, "UserPromptSubmit", { prompt: event.prompt }) : "";
    if (block) out.message = { customType: "marchdb", content: block, display: false };
    if (profiles) out.systemPrompt = `${event.systemPrompt}\n\n${profiles}`;
    return out;
  });

  pi.on("message_end", async (event) => {
    if (event.message && event.message.role === "assistant") latest = { message: event.message, steered: false };
  });

  pi.on("tool_result", async (event, ctx) => {
    if (!latest || latest.steered) return undefined;
    latest.steered = true; // one steer per assistant message, after its first tool
    const words = wordsOf(latest.message);
    const block = words ? await said(ctx, "PostToolUse", { assistant_text: words }) : "";
    if (!block) return undefined;
    return { content: [...(event.content || []), { type: "text", text: block }] };
  });

  pi.on("agent_end", async (event, ctx) => {
    const replies = (event.messages || []).filter((m) => m && m.role === "assistant");
    const reply = wordsOf(replies[replies.length - 1]);
    if (reply) await said(ctx, "Stop", { last_assistant_message: reply });
  });

  pi.on("session_compact", async (_event, ctx) => {
    await said(ctx, "PreCompact", {});
  });
}
