//! Real threads, released together.

use std::sync::Barrier;

/// Runs `task(i)` on `threads` threads that all start at the same moment
/// (a barrier), and returns their results in thread order.
pub fn release_together<R: Send>(threads: usize, task: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, task) = (&barrier, &task);
                scope.spawn(move || {
                    barrier.wait();
                    task(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a released thread panicked"))
            .collect()
    })
}
