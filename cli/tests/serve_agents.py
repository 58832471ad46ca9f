"""Drives `infer serve` with real clients as their users use them (cli/tests/serve_agents.rs runs it).

    python serve_agents.py BASE_URL MODEL CASE

CASE is one of:
- tools: the official `openai` client's tool-calling round trip, not streamed: the model calls
  get_weather, the call's message goes back as returned plus a `tool` message with its result,
  and the model answers;
- tools_stream: the same round trip streamed, `delta.tool_calls` chunks assembled by index as
  client users do;
- agent: an OpenAI Agents SDK Agent with a @function_tool, run by Runner.run on
  OpenAIChatCompletionsModel pointed at the server;
- agent_stream: the same agent run by Runner.run_streamed, its events consumed;
- parse: structured output, `client.chat.completions.parse(response_format=PydanticModel)`.

Prints one JSON object with what the case observed; the Rust test asserts on it.
"""

import asyncio
import json
import sys

import openai
import pydantic

SYSTEM = "You are a helpful assistant. After a tool returns, answer the user in one plain sentence."
QUESTION = "What is the weather like in Paris today?"
WEATHER = {"city": "Paris", "temperature_celsius": 18, "sky": "sunny"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
                "required": ["city"],
            },
        },
    }
]
MAX_TOKENS = 96


def client(base):
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600)


def call_json(call):
    """A call as the Rust side reads it: id, type, name, the arguments text and its parse."""
    return {
        "id": call["id"],
        "type": call["type"],
        "name": call["function"]["name"],
        "arguments_text": call["function"]["arguments"],
        "arguments": json.loads(call["function"]["arguments"]),
    }


def case_tools(c, model):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    first = c.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, temperature=0, max_tokens=MAX_TOKENS
    )
    choice = first.choices[0]
    calls = [call_json(t.model_dump()) for t in choice.message.tool_calls or []]
    # As the client's docs do: the assistant message goes back as the client returned it.
    messages.append(choice.message)
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(WEATHER)})
    # The answer is asked for with tool_choice "none": this 0.5B model, offered the tool again,
    # calls it again instead of reading its result.
    final = c.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=MAX_TOKENS
    )
    return {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "role": choice.message.role,
        "calls": calls,
        "final_finish_reason": final.choices[0].finish_reason,
        "final_content": final.choices[0].message.content,
        "final_calls": len(final.choices[0].message.tool_calls or []),
    }


def stream(c, model, messages, **extra):
    """One streamed reply assembled as client users do: content concatenated, tool calls
    gathered by index (id, type and name from the chunk that has them, arguments appended)."""
    chunks = c.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOLS,
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        **extra,
    )
    content, calls, finish, tool_chunks = "", {}, None, 0
    for chunk in chunks:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                tool_chunks += 1
                call = calls.setdefault(d.index, {"id": None, "type": None, "function": {"name": "", "arguments": ""}})
                if d.id:
                    call["id"] = d.id
                if d.type:
                    call["type"] = d.type
                if d.function and d.function.name:
                    call["function"]["name"] += d.function.name
                if d.function and d.function.arguments:
                    call["function"]["arguments"] += d.function.arguments
            finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish, tool_chunks


def case_tools_stream(c, model):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    content, calls, finish, tool_chunks = stream(c, model, messages)
    messages.append({"role": "assistant", "content": content or None, "tool_calls": calls})
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(WEATHER)})
    final_content, final_calls, final_finish, _ = stream(c, model, messages, tool_choice="none")
    return {
        "finish_reason": finish,
        "content": content,
        "calls": [call_json(call) for call in calls],
        "tool_chunks": tool_chunks,
        "final_finish_reason": final_finish,
        "final_content": final_content,
        "final_calls": len(final_calls),
    }


def case_agent(base, model, streamed=False):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    # Traces would go to OpenAI's platform: off, as for any other provider.
    set_tracing_disabled(True)
    ran = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city, e.g. Paris.
        """
        ran.append({"city": city})
        return json.dumps(dict(WEATHER, city=city))

    agent = Agent(
        name="Weather assistant",
        instructions=SYSTEM,
        model=OpenAIChatCompletionsModel(
            model=model,
            openai_client=openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=600),
        ),
        tools=[get_weather],
        # A 0.5B model may answer from its own knowledge: the first turn must call the tool. The
        # runner resets tool_choice after a tool ran (reset_tool_choice), so the next turn answers.
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=MAX_TOKENS),
    )

    async def run():
        if not streamed:
            return await Runner.run(agent, QUESTION, max_turns=4), []
        result = Runner.run_streamed(agent, QUESTION, max_turns=4)
        events = [e.name async for e in result.stream_events() if e.type == "run_item_stream_event"]
        return result, events

    result, events = asyncio.run(run())
    return {
        "ran": ran,
        "items": [type(item).__name__ for item in result.new_items],
        "events": events,
        "final_output": result.final_output,
    }


def case_agent_stream(base, model):
    return case_agent(base, model, streamed=True)


class Weather(pydantic.BaseModel):
    city: str
    temperature_celsius: int
    sunny: bool


def case_parse(c, model):
    parse = getattr(c.chat.completions, "parse", None) or c.beta.chat.completions.parse
    r = parse(
        model=model,
        messages=[
            {"role": "system", "content": "Extract the weather report."},
            {"role": "user", "content": "In Paris it is 18 degrees Celsius and sunny."},
        ],
        response_format=Weather,
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    message = r.choices[0].message
    return {
        "finish_reason": r.choices[0].finish_reason,
        "content": message.content,
        "parsed": message.parsed.model_dump() if message.parsed is not None else None,
        "refusal": message.refusal,
    }


def main():
    base, model, case = sys.argv[1:4]
    if case.startswith("agent"):
        out = globals()[f"case_{case}"](base, model)
    else:
        out = globals()[f"case_{case}"](client(base), model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
