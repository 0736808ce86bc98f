//! The leases one instance holds: a sharded table of keys, each with its
//! lease, its renewal in flight and its history, and a queue of when each
//! lease ends.

use crate::sizing::History;
use hashbrown::HashTable;
use parking_lot::Mutex;
use ratelab_core::{Decision, Receipt};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::Arc;
use tokio::sync::Notify;

/// Shards of the table: enough that threads on different keys rarely
/// meet on one lock.
const SHARDS: usize = 32;

/// Units leased from the shared limiter under one receipt.
#[derive(Debug)]
pub(crate) struct Lease {
    /// The shared limiter's receipt for the whole lease; `None` when it
    /// issues none (nothing can be given back then).
    pub(crate) receipt: Option<Receipt>,
    /// Unique per lease: the local receipts' stamp.
    pub(crate) generation: u64,
    pub(crate) granted: u32,
    /// Units admitted from it and kept (local refunds take back), plus
    /// what settlements above the cost charged.
    pub(crate) used: u32,
    /// The local instant its request was sent: it counts from there.
    pub(crate) sent_at: u64,
    pub(crate) expires_at: u64,
    /// When the shared key was full again, to the grant's report.
    pub(crate) reset_at: u64,
    pub(crate) limit: u64,
    /// What the shared limiter had left once the lease was granted.
    pub(crate) left: u64,
}

impl Lease {
    /// It may admit at `now`: sent no later, and not yet expired. A clock
    /// that went back before the request ends it: its lifetime is counted
    /// on a clock that moves forward.
    pub(crate) fn live(&self, now: u64) -> bool {
        self.sent_at <= now && now < self.expires_at
    }

    pub(crate) fn unused(&self) -> u32 {
        self.granted.saturating_sub(self.used)
    }

    /// The decision of an admission from it, at `now`: what remains is
    /// what the shared limiter had left at the grant plus what the lease
    /// holds unused (other instances' admissions since are not seen).
    pub(crate) fn decision(&self, now: u64) -> Decision {
        Decision::admitted(self.limit)
            .with_remaining(self.left.saturating_add(u64::from(self.unused())))
            .with_reset_after_micros(self.reset_at.saturating_sub(now))
    }
}

/// A refusal of the shared limiter, answered locally until its retry
/// instant for checks at least as costly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub(crate) from: u64,
    pub(crate) until: u64,
    pub(crate) cost: u32,
    pub(crate) decision: Decision,
}

/// A lease that ended, for the shared limiter to settle: its receipt and
/// the units it finally counts for.
pub(crate) type Ended = (Receipt, u32);

/// One key's leasing state.
#[derive(Debug)]
pub(crate) struct Entry {
    key: Box<[u8]>,
    hash: u64,
    pub(crate) lease: Option<Lease>,
    /// A request for a new lease is in flight: other checks wait on
    /// `notify`.
    pub(crate) renewing: bool,
    pub(crate) notify: Arc<Notify>,
    pub(crate) history: History,
    /// What settlements above the cost charged after their lease ended:
    /// counted as used in the key's next lease.
    pub(crate) owed: u32,
    pub(crate) refusal: Option<Refusal>,
}

impl Entry {
    /// Ends its lease (if any): what must be settled goes to `ended`. A
    /// lease used exactly as granted needs no settlement (its receipt
    /// dropped counts as charged).
    pub(crate) fn end_lease(&mut self, ended: &mut Vec<Ended>) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if lease.used < lease.granted {
            self.history.expired(lease.used);
        }
        if let Some(receipt) = lease.receipt
            && lease.used != lease.granted
        {
            ended.push((receipt, lease.used));
        }
    }

    /// Nothing in it but history: it may be forgotten for room.
    fn idle(&self) -> bool {
        self.lease.is_none() && !self.renewing && self.owed == 0
    }
}

#[derive(Debug, Default)]
pub(crate) struct Shard {
    table: HashTable<Entry>,
    /// (expires_at, generation, hash) of every lease granted; a lease
    /// replaced before its end leaves a stale one, dropped when due.
    expiry: BinaryHeap<Reverse<(u64, u64, u64)>>,
}

impl Shard {
    pub(crate) fn get_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Entry> {
        self.table.find_mut(hash, |e| &*e.key == key)
    }

    /// The entry of `key`, made if there is room for it (after ending the
    /// leases due by `now` and forgetting idle keys); `None` when every
    /// one of the shard's `capacity` slots is busy.
    pub(crate) fn entry(
        &mut self,
        hash: u64,
        key: &[u8],
        now: u64,
        capacity: usize,
        ended: &mut Vec<Ended>,
    ) -> Option<&mut Entry> {
        if self.table.find(hash, |e| &*e.key == key).is_none() {
            if self.table.len() >= capacity {
                self.sweep(now, ended);
                self.table.retain(|e| !e.idle());
            }
            if self.table.len() >= capacity {
                return None;
            }
            self.table.insert_unique(
                hash,
                Entry {
                    key: key.into(),
                    hash,
                    lease: None,
                    renewing: false,
                    notify: Arc::new(Notify::new()),
                    history: History::default(),
                    owed: 0,
                    refusal: None,
                },
                |e| e.hash,
            );
        }
        self.get_mut(hash, key)
    }

    /// Queues the end of the lease `generation` of the key hashed `hash`.
    pub(crate) fn schedule(&mut self, expires_at: u64, generation: u64, hash: u64) {
        self.expiry.push(Reverse((expires_at, generation, hash)));
    }

    /// Ends every lease due by `now`.
    pub(crate) fn sweep(&mut self, now: u64, ended: &mut Vec<Ended>) {
        while let Some(&Reverse((expires_at, generation, hash))) = self.expiry.peek() {
            if expires_at > now {
                break;
            }
            self.expiry.pop();
            let found = self.table.find_mut(hash, |e| {
                e.lease.as_ref().is_some_and(|l| l.generation == generation)
            });
            if let Some(entry) = found {
                entry.end_lease(ended);
            }
        }
    }

    /// Ends every lease.
    pub(crate) fn end_all(&mut self, ended: &mut Vec<Ended>) {
        for entry in self.table.iter_mut() {
            entry.end_lease(ended);
        }
        self.expiry.clear();
        self.table.retain(|e| !e.idle());
    }

    pub(crate) fn leases(&self) -> usize {
        self.table.iter().filter(|e| e.lease.is_some()).count()
    }
}

/// Every key's leasing state, in shards.
#[derive(Debug)]
pub(crate) struct Table {
    shards: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::RandomState,
    /// Keys per shard.
    pub(crate) capacity: usize,
}

impl Table {
    pub(crate) fn new(max_keys: usize) -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::RandomState::default(),
            capacity: max_keys.div_ceil(SHARDS),
        }
    }

    /// The hash of `key` and its shard.
    pub(crate) fn locate(&self, key: &[u8]) -> (u64, &Mutex<Shard>) {
        let hash = self.hasher.hash_one(key);
        // The high bits pick the shard; the table uses the low ones.
        let index = (hash >> 58) as usize % SHARDS;
        (hash, &self.shards[index])
    }

    pub(crate) fn shards(&self) -> &[Mutex<Shard>] {
        &self.shards
    }
}
