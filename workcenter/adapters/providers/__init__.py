"""Implementations of the Coordinator's provider port
(``workcenter.service_layer.ports.CoordinatorProvider``).

``scripted`` answers from a script, for tests and the demo; ``openai_compatible``
asks any OpenAI-compatible chat-completions server (needs ``workcenter[llm]``).
"""
