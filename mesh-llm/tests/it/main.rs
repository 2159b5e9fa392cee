//! The integration tests of mesh-llm: the LLM agent against llama.cpp's server running a real
//! (tiny, tool-calling) model file, mesh-llm/tests/fixtures/toy-agent.gguf, on a real broker.
//! They run when `MESH_LLM_SERVER` names llama.cpp's `llama-server` (`scripts/test` installs
//! it, pinned, and sets it). The toy model's text is word salad: the tests assert structure
//! (which tools were called, what the stream carried, how the task ended), not wording.

mod agent;
mod support;
