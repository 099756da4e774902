//! A [`Session`] watched by tokio's reactor (feature `tokio`): an
//! [`AsyncSession`] waits for the rings without blocking a runtime
//! thread, and needs no `unsafe` in the embedder's code.

use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::attach::sys;
use crate::error::Error;
use crate::session::Session;

/// A session whose readiness (a ring past its watermark, the command's
/// exit) a tokio task awaits. It owns a duplicate of the session's
/// poller descriptor, registered with the runtime's reactor, so the
/// session itself stays freely usable (`session_mut`).
pub struct AsyncSession {
    session: Session,
    ready: AsyncFd<std::os::fd::OwnedFd>,
}

impl AsyncSession {
    /// Registers `session` with the current tokio runtime. Call it from
    /// within the runtime (a task, or `Runtime::enter`).
    pub fn new(session: Session) -> Result<AsyncSession, Error> {
        let dup = session
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("duplicating the session's poller", e))?;
        let ready = sys::async_readiness(dup)
            .map_err(|e| Error::io("registering the session with tokio's reactor", e))?;
        Ok(AsyncSession { session, ready })
    }

    /// Waits until a ring has data to read (or the recorded command or
    /// a `-p` process has exited), then takes the readiness: call
    /// [`Session::drain`] next (through [`AsyncSession::session_mut`]).
    /// Cancel-safe.
    pub async fn readable(&mut self) -> Result<(), Error> {
        let mut guard = self
            .ready
            .readable()
            .await
            .map_err(|e| Error::io("waiting for the rings", e))?;
        // Cleared before the session takes the readiness, so a ring that
        // fills meanwhile wakes the task again.
        guard.clear_ready();
        self.session.wait(Some(Duration::ZERO))?;
        Ok(())
    }

    /// The session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session, to drain, enable or disable.
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// The session, no longer watched by the reactor.
    pub fn into_inner(self) -> Session {
        self.session
    }
}
