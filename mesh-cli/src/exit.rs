//! How the `mesh` command fails: a one-line reason on stderr and an exit code scripts can
//! rely on.

/// A failure of a command, by the exit code it gives.
#[derive(Debug)]
pub enum Failure {
    /// 1: the task failed, was rejected or canceled; or anything else went wrong.
    Other(String),
    /// 2: bad usage or configuration.
    Usage(String),
    /// 3: the broker or the gateway does not answer, or a port is taken.
    Unreachable(String),
    /// 4: the agent is unknown or offline.
    UnknownAgent(String),
}

impl Failure {
    /// The exit code.
    pub fn code(&self) -> i32 {
        match self {
            Failure::Other(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) => 3,
            Failure::UnknownAgent(_) => 4,
        }
    }

    /// Prints the reason and exits.
    pub fn exit(self) -> ! {
        let (Failure::Other(reason)
        | Failure::Usage(reason)
        | Failure::Unreachable(reason)
        | Failure::UnknownAgent(reason)) = &self;
        eprintln!("mesh: {reason}");
        std::process::exit(self.code())
    }
}

/// The result of a command.
pub type Outcome = Result<(), Failure>;
