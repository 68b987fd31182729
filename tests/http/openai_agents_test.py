"""A tool-less agent loop of the OpenAI Agents SDK (`openai-agents`, pinned in
openai_agents_test.sh) against streamd's HTTP API, as an agent developer would point it at a
local server: the Runner over the Responses API, each turn continuing the last with
previous_response_id (streamd keeps the session, so only the new input is prefilled), and the
Runner over Chat Completions, re-sending the history it keeps (to_input_list) every turn.

Environment: STREAMD_BINARY, STREAMD_MODEL (streamd_daemon.py starts the daemon).
"""

import unittest

import openai
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                    Runner, set_tracing_disabled)

from streamd_daemon import DaemonTest

# Nothing leaves the machine: the SDK would otherwise upload traces to OpenAI.
set_tracing_disabled(True)
TURNS = ["Name a color.", "Name another one.", "Which of the two is darker?"]
# The SDK takes a response that stopped at max_output_tokens (status "incomplete") as a failed
# turn: the limit is far above what these short questions get as answers.
SETTINGS = ModelSettings(temperature=0, max_tokens=200)


class AgentLoopTest(DaemonTest):
    tmp_prefix = "streamd-agents-"

    def client(self):
        # One per run: Runner.run_sync runs each turn in an event loop of its own, and a client's
        # connections belong to the loop that opened them.
        return openai.AsyncOpenAI(base_url=self.daemon.url, api_key="none")

    def test_responses_loop_continues_one_session(self):
        previous = None
        context = 0
        for i, text in enumerate(TURNS):
            agent = Agent(name="assistant", instructions="Answer in a few words.",
                          model=OpenAIResponsesModel(model="smollm2", openai_client=self.client()),
                          model_settings=SETTINGS)
            result = Runner.run_sync(agent, text, previous_response_id=previous)
            self.assertTrue(result.final_output, f"turn {i}: no answer")
            (response,) = result.raw_responses  # no tools: one model call per turn
            usage = response.usage
            if previous is None:
                self.assertEqual(usage.input_tokens_details.cached_tokens, 0)
            else:
                # The session's context before this turn was reused, not prefilled again.
                self.assertEqual(usage.input_tokens_details.cached_tokens, context)
                self.assertEqual(result.last_response_id.rsplit("_", 1)[0],
                                 previous.rsplit("_", 1)[0], "a new session was opened")
            self.assertGreater(usage.input_tokens, context)
            context = usage.input_tokens + usage.output_tokens
            previous = result.last_response_id

    def test_chat_completions_loop_resends_its_history(self):
        history = []
        for i, text in enumerate(TURNS):
            agent = Agent(name="assistant", instructions="Answer in a few words.",
                          model=OpenAIChatCompletionsModel(model="smollm2",
                                                           openai_client=self.client()),
                          model_settings=SETTINGS)
            result = Runner.run_sync(agent, history + [{"role": "user", "content": text}])
            self.assertTrue(result.final_output, f"turn {i}: no answer")
            (response,) = result.raw_responses
            history = result.to_input_list()
            # The history grows by this turn's question and answer.
            self.assertEqual(len(history), 2 * (i + 1))
            self.assertGreater(response.usage.output_tokens, 0)


if __name__ == "__main__":
    unittest.main()
