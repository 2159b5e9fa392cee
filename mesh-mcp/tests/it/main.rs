//! The integration tests of mesh-mcp: MCP servers someone else wrote (the Python SDK's
//! reference time server, the TypeScript "everything" server) and a test server on the official
//! Python SDK, served as agents on a real broker. They run when `MESH_MCP_PYTHON` names a
//! Python with the `mcp` and `mcp-server-time` packages and `MESH_MCP_EVERYTHING` the
//! everything server (`scripts/test` installs both, pinned, and sets them).

mod agent;
mod support;
