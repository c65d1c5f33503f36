// marchdb for OpenClaw: passive recall in the model's context.
//
// - before_prompt_build: the prompt's [recall] block as prependContext (it reaches the model in
//   the user message, before the prompt) and the profiles as appendSystemContext;
// - agent_end: the run's last reply is recorded; after_compaction: the session's window starts afresh.

const profiles = new Map(); // session -> its profiles
const sessionOf = (ctx) => (ctx && (ctx.sessionId || ctx.sessionKey)) || "unknown";
const said = (ctx, name, fields) =>
  ask({ hook_event_name: name, session_id: sessionOf(ctx), cwd: (ctx && ctx.workspaceDir) || process.cwd(), ...fields });

export default {
  id: "marchdb",
  name: "marchdb",
  description: "marchdb memory: recall hints for each prompt, the profiles in the system prompt",
  register(api) {
    api.on("before_prompt_build", async (event, ctx) => {
      const session = sessionOf(ctx);
      if (!profiles.has(session)) profiles.set(session, await said(ctx, "SessionStart", { source: "startup" }));
      const prompt = typeof event.currentUserMessage === "string" ? event.currentUserMessage : event.prompt;
      const block = prompt ? await said(ctx, "UserPromptSubmit", { prompt }) : "";
      const out = {};
      if (block) out.prependContext = block;
      if (profiles.get(session)) out.appendSystemContext = profiles.get(session);
      return out;
    });
    api.on("agent_end", async (event, ctx) => {
      const replies = ((event && event.messages) || []).filter((m) => m && m.role === "assistant");
      const reply = wordsOf(replies[replies.length - 1]);
      if (reply) await said(ctx, "Stop", { last_assistant_message: reply });
    });
    api.on("after_compaction", async (_event, ctx) => {
      await said(ctx, "PreCompact", {});
    });
  },
};
