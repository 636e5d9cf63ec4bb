"""Genesis LLMs (Qwen2/2.5/3), generation and chat: placeholder until genesis-llm is written."""
