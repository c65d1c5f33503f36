// marchdb for opencode (and Kilo, its fork): passive recall in the model's context.
//
// - the profiles go into the first system message of each model call (a second system message
//   breaks local OpenAI-compatible servers);
// - each prompt's [recall] block is appended to the text of that user message, in every model
//   call that holds it (asked once per message);
// - after a tool, at most 2 hints for the assistant's words of the turn are appended to that
//   tool's output;
// - the reply that ends a turn is recorded; a compaction starts the session's window afresh.
function textOf(parts) {
  return (parts || [])
    .filter((p) => p && p.type === "text" && typeof p.text === "string" && !p.synthetic)
    .map((p) => p.text)
    .join("\n")
    .trim();
}

function append(text, block) {
  return text.endsWith(block) ? text : `${text}\n\n${block}`;
}

export const MarchdbPlugin = async ({ directory }) => {
  const cwd = directory || process.cwd();
  const profiles = new Map(); // session -> its profiles
  const hinted = new Map(); // user message -> its [recall] block
  const steered = new Map(); // assistant message -> the hints after its tool
  const words = new Map(); // assistant message -> its latest text (for the turn's end)
  const lastReply = new Map(); // session -> its latest assistant message
  const said = (session, name, fields) => ask({ hook_event_name: name, session_id: session, cwd, ...fields });

  return {
    "experimental.chat.system.transform": async (input, output) => {
      const session = input.sessionID || "unknown";
      if (!profiles.has(session)) profiles.set(session, await said(session, "SessionStart", { source: "startup" }));
      const block = profiles.get(session);
      if (!block || !Array.isArray(output.system)) return;
      if (output.system.length === 0) output.system.push(block);
      else output.system[0] = append(output.system[0], block);
    },

    "experimental.chat.messages.transform": async (_input, output) => {
      const messages = output.messages || [];
      let last = -1;
      messages.forEach((m, i) => {
        if (m.info && m.info.role === "user") last = i;
      });
      if (last < 0) return;
      const user = messages[last];
      const session = user.info.sessionID || "unknown";
      if (!hinted.has(user.info.id)) {
        const prompt = textOf(user.parts);
        hinted.set(user.info.id, prompt ? await said(session, "UserPromptSubmit", { prompt }) : "");
      }
      const turn = messages.slice(last + 1).filter((m) => m.info && m.info.role === "assistant");
      const latest = turn[turn.length - 1];
      const tools = latest ? (latest.parts || []).filter((p) => p.type === "tool" && p.state) : [];
      if (latest && tools.length && !steered.has(latest.info.id)) {
        const text = textOf(latest.parts);
        steered.set(latest.info.id, text ? await said(session, "PostToolUse", { assistant_text: text }) : "");
      }
      for (const m of messages) {
        const block = m.info && hinted.get(m.info.id);
        if (block) {
          const part = [...(m.parts || [])].reverse().find((p) => p.type === "text" && typeof p.text === "string");
          if (part) part.text = append(part.text, block);
        }
        const steer = m.info && steered.get(m.info.id);
        if (steer) {
          const done = [...(m.parts || [])]
            .reverse()
            .find((p) => p.type === "tool" && p.state && p.state.status === "completed");
          if (done && typeof done.state.output === "string") done.state.output = append(done.state.output, steer);
        }
      }
    },

    "experimental.session.compacting": async (input) => {
      await said(input.sessionID || "unknown", "PreCompact", {});
    },

    event: async ({ event }) => {
      const props = (event && event.properties) || {};
      if (event.type === "message.part.updated" && props.part && props.part.type === "text") {
        words.set(props.part.messageID, props.part.text || "");
      } else if (event.type === "message.updated" && props.info && props.info.role === "assistant") {
        lastReply.set(props.info.sessionID, props.info.id);
      } else if (event.type === "session.idle") {
        const reply = words.get(lastReply.get(props.sessionID));
        lastReply.delete(props.sessionID);
        if (reply && reply.trim()) await said(props.sessionID, "Stop", { last_assistant_message: reply });
      }
    },
  };
};
