"""One module per client dialect: openai_chat, openai_completions, responses, anthropic and
ollama (discovery). Each owns its wire format; inference/pipeline.py owns a request's life."""
