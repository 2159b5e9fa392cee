//! Which MCP server an agent serves: a command to run (MCP over its stdin and stdout) or the URL
//! of a server speaking Streamable HTTP.

use std::fmt;

/// The longest command line or URL accepted (bytes).
const MAX_SPEC: usize = 8 * 1024;

/// An MCP server to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpServer {
    /// A program run as a child process; it speaks MCP on its stdin and stdout, and what it
    /// writes on stderr goes to this process's log.
    Command {
        /// The program (found on the `PATH` when it has no `/`).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A server reached over Streamable HTTP at this URL.
    Url {
        /// `http://` or `https://`.
        url: String,
        /// A bearer token sent with every request, when the server asks for one.
        bearer: Option<String>,
    },
}

/// Why a server cannot be described this way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerSpecError {
    /// No program and no URL.
    #[error("say which MCP server to run (a command after `--`) or reach (--url)")]
    Missing,
    /// Both a program and a URL.
    #[error("give either a command or --url, not both")]
    Both,
    /// A URL that is not http(s).
    #[error("--url must start with http:// or https://: {0:?}")]
    BadUrl(String),
    /// Too long, or a NUL byte.
    #[error("the MCP server's command line or URL is too long or holds a NUL byte")]
    Unreasonable,
}

impl McpServer {
    /// The server a command line (`command`, its first word the program) or a URL names.
    pub fn from_parts(
        command: Vec<String>,
        url: Option<String>,
        bearer: Option<String>,
    ) -> Result<McpServer, ServerSpecError> {
        let total: usize =
            command.iter().map(String::len).sum::<usize>() + url.as_ref().map_or(0, String::len);
        if total > MAX_SPEC || command.iter().chain(url.iter()).any(|s| s.contains('\0')) {
            return Err(ServerSpecError::Unreasonable);
        }
        match (command.split_first(), url) {
            (Some(_), Some(_)) => Err(ServerSpecError::Both),
            (None, None) => Err(ServerSpecError::Missing),
            (Some((program, args)), None) => Ok(McpServer::Command {
                program: program.clone(),
                args: args.to_vec(),
            }),
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ServerSpecError::BadUrl(url));
                }
                Ok(McpServer::Url { url, bearer })
            }
        }
    }
}

/// For logs and errors: the command line, or the URL without its query (which may hold a
/// secret); never the bearer token.
impl fmt::Display for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpServer::Command { program, args } => {
                write!(f, "{program}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                Ok(())
            }
            McpServer::Url { url, .. } => {
                f.write_str(url.split(['?', '#']).next().unwrap_or_default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_or_a_url() {
        let command =
            McpServer::from_parts(vec!["mcp-server-time".into(), "--x".into()], None, None);
        assert_eq!(
            command,
            Ok(McpServer::Command {
                program: "mcp-server-time".into(),
                args: vec!["--x".into()]
            })
        );
        assert_eq!(
            McpServer::from_parts(vec![], None, None),
            Err(ServerSpecError::Missing)
        );
        assert_eq!(
            McpServer::from_parts(vec!["a".into()], Some("http://x".into()), None),
            Err(ServerSpecError::Both)
        );
        assert!(matches!(
            McpServer::from_parts(vec![], Some("ftp://x".into()), None),
            Err(ServerSpecError::BadUrl(_))
        ));
        assert_eq!(
            McpServer::from_parts(vec!["a\0b".into()], None, None),
            Err(ServerSpecError::Unreasonable)
        );
        assert_eq!(
            McpServer::from_parts(vec!["x".repeat(MAX_SPEC + 1)], None, None),
            Err(ServerSpecError::Unreasonable)
        );
    }

    #[test]
    fn shown_without_secrets() {
        let server = McpServer::Url {
            url: "https://tools.example/mcp?key=secret".into(),
            bearer: Some("token".into()),
        };
        assert_eq!(server.to_string(), "https://tools.example/mcp");
    }
}
