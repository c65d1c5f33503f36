// marchdb for the Cline CLI: passive recall in the model's context, as a Cline plugin.
//
// The CLI drops what its hook files answer, so it gets this plugin instead:
// - the profiles are a rule of the system prompt, asked once per session;
// - each prompt's [recall] block is added to the prompt's own message, after the prompt, by a
//   message builder (it runs on every request: the block is asked once per prompt and added again
//   to the same message each time, so the history the model sees stays the same);
// - after a tool, at most 2 hints for the assistant's words of the turn are added to the message
//   that carries the tool's result, once per assistant message;
// - the reply that ends the run is recorded.

// What a user typed, inside the wrapper the CLI puts around it.
const USER_INPUT = /<user_input\b[^>]*>([\s\S]*?)<\/user_input>/;

function promptOf(message) {
  if (!message || message.role !== "user") return "";
  const found = USER_INPUT.exec(wordsOf(message));
  return found ? found[1].trim() : "";
}

function withText(message, text) {
  const content = Array.isArray(message.content)
    ? [...message.content, { type: "text", text }]
    : [{ type: "text", text: String(message.content ?? "") }, { type: "text", text }];
  return { ...message, content };
}

// The session the plugin was set up for, which the run's end is recorded in.
let current = { session: "unknown", cwd: process.cwd() };

export default {
  name: "marchdb",
  manifest: { capabilities: ["rules", "messageBuilders", "hooks"], hooks: ["afterRun"] },
  setup(api, ctx) {
    const session = (ctx && ctx.session && ctx.session.sessionId) || "unknown";
    const cwd = (ctx && ctx.workspaceInfo && ctx.workspaceInfo.rootPath) || process.cwd();
    current = { session, cwd };
    const said = (name, fields) => ask({ hook_event_name: name, session_id: session, cwd, ...fields });
    let profiles = null;
    // Blocks asked, by the message they go after: "p<index>:<prompt>" for a prompt,
    // "t<index>" for the assistant message whose first tool they follow.
    const blocks = new Map();
    const once = (key, asking) => {
      if (!blocks.has(key)) blocks.set(key, asking());
      return blocks.get(key);
    };

    api.registerRule({
      id: "marchdb-profiles",
      source: "marchdb",
      content: () => {
        if (profiles === null) profiles = said("SessionStart", { source: "startup" });
        return profiles;
      },
    });

    api.registerMessageBuilder({
      name: "marchdb-recall",
      async build(messages) {
        if (!Array.isArray(messages) || messages.length === 0) return messages;
        const out = messages.slice();
        // Prompts: the newest one's block is asked the first time it is seen; an earlier one keeps
        // the block it had (a resumed session's earlier prompts, unseen here, get none).
        let newest = -1;
        for (let i = 0; i < out.length; i++) if (promptOf(out[i])) newest = i;
        for (let i = 0; i <= newest; i++) {
          const prompt = promptOf(out[i]);
          const key = `p${i}:${prompt}`;
          if (!prompt || (i !== newest && !blocks.has(key))) continue;
          const block = await once(key, () => said("UserPromptSubmit", { prompt }));
          if (block) out[i] = withText(out[i], block);
        }
        // The steer: a message that answers the tools of the assistant message before it gets, the
        // first time, the block for that assistant's words (asked once per assistant message).
        for (let i = 0; i + 1 < out.length; i++) {
          if (out[i].role !== "assistant" || out[i + 1].role === "assistant" || promptOf(out[i + 1])) continue;
          const key = `t${i}`;
          const words = wordsOf(out[i]);
          if (!blocks.has(key) && (i + 1 !== out.length - 1 || !words)) continue; // only the newest asks
          const block = await once(key, () => said("PostToolUse", { assistant_text: words }));
          if (block) out[i + 1] = withText(out[i + 1], block);
        }
        return out;
      },
    });
  },
  hooks: {
    async afterRun(context) {
      const messages = (context && context.snapshot && context.snapshot.messages) || [];
      const replies = messages.filter((m) => m && m.role === "assistant");
      const reply = wordsOf(replies[replies.length - 1]);
      if (!reply) return;
      await ask({ hook_event_name: "Stop", session_id: current.session, cwd: current.cwd, last_assistant_message: reply });
    },
  },
};
