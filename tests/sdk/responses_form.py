"""The Responses API form of a chat-completions conversation, as an agent would send it.

Shared by the SDK check (tests/sdk/check.py) and the dashboard's browser check
(tests/dashboard/check.py): both send corpus conversations to `/openai/v1/responses`.
"""


def responses_request(chat, model="mock"):
    """`input` items for the messages (function calls and their outputs included), the first
    system message as `instructions`, the tools in the flat shape, and `store: false`."""
    instructions = None
    items = []
    for i, m in enumerate(chat["messages"]):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content)
        if m["role"] == "system" and i == 0:
            instructions = content
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": content or ""})
        else:
            if content:
                kind = "output_text" if m["role"] == "assistant" else "input_text"
                items.append({"type": "message", "role": m["role"], "content": [{"type": kind, "text": content}]})
            for call in m.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
    tools = [{"type": "function", "name": t["function"]["name"], "description": t["function"].get("description", ""),
              "parameters": t["function"].get("parameters", {})} for t in chat.get("tools") or []]
    return dict(model=model, instructions=instructions, input=items, tools=tools, store=False)
