//! Starting the library's own threads inside someone else's process.
//!
//! A thread's first `malloc`/`free` makes glibc create an arena for it, which maps and trims
//! memory with `mmap`/`munmap`. Libraries we share the process with may patch those very
//! functions while other threads run: libfabric's memory monitor ("memhooks", started when a
//! domain opens, right after `ibv_open_device` returns) rewrites the first bytes of libc's
//! `munmap` with a jump to its hook. A thread of ours that the scheduler happened to leave
//! inside `munmap` at that moment resumes in the middle of the new instruction and dies with
//! SIGSEGV (seen in fi_pingpong over verbs: the progress thread, still in its start-up arena
//! setup, faulted at `munmap+9` after the main thread had gone on to install the hooks).
//!
//! [`spawn_started`] therefore returns only once the new thread has finished the runtime's
//! start-up (its arena exists) and is about to run its body: by the time the verb that made
//! the thread returns to the application, the thread calls into libc only as its body does
//! (which, for our threads, means blocking in `poll`/`epoll_wait` and rare small allocations
//! from an arena that already exists).

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Spawns a thread named `name` running `body` and waits until it has started (see the
/// module's documentation). Errors: the thread could not be created, or it ended before it
/// started its body (the runtime failed to set it up).
pub fn spawn_started<T, F>(name: &str, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (started, wait) = mpsc::sync_channel::<()>(1);
    let handle = std::thread::Builder::new().name(name.into()).spawn(move || {
        // The start-up allocations (the thread's own bookkeeping, freed before this line runs)
        // are behind us; one more allocation here settles the arena before we report.
        drop(std::hint::black_box(Box::new(0u64)));
        let _ = started.send(());
        body()
    })?;
    match wait.recv() {
        Ok(()) => Ok(handle),
        Err(_) => {
            let _ = handle.join();
            Err(io::Error::other(format!("thread {name} ended before it started")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn returns_once_the_thread_runs_and_joins_its_result() {
        let running = Arc::new(AtomicBool::new(false));
        let r = running.clone();
        let (go, wait) = mpsc::channel::<()>();
        let h = spawn_started("urxe-test", move || {
            r.store(true, Ordering::SeqCst);
            wait.recv().unwrap();
            7
        })
        .unwrap();
        // The body may not have reached its first line yet, but the thread has started: it
        // finishes when told to, and its result comes back through the handle.
        assert_eq!(h.thread().name(), Some("urxe-test"));
        go.send(()).unwrap();
        assert_eq!(h.join().unwrap(), 7);
        assert!(running.load(Ordering::SeqCst));
    }
}
