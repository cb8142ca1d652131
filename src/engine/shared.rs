//! What requester, responder and completer share: the configuration, host memory, the key
//! table and the object tables (PDs, CQs, SRQs, AHs), the event queue and the counters —
//! everything of a device but its QPs.

use std::collections::VecDeque;
use std::net::IpAddr;

use super::counters::Counters;
use super::cq::{Cq, PushOutcome};
use super::mr::KeyTable;
use super::srq::Srq;
use super::types::*;
use crate::wire::icrc::{IcrcFlows, IpFields};

/// A table of objects addressed by `u32` handles; handle 0 is never valid.
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: VecDeque<u32>,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        // Handle 0 is never valid.
        Slab { items: vec![None], free: VecDeque::new() }
    }
    pub(crate) fn insert(&mut self, t: T, max: u32) -> Option<u32> {
        if self.len() >= max as usize {
            return None;
        }
        let id = match self.free.pop_front() {
            Some(id) if self.free.len() > 16 => id,
            Some(id) => {
                self.free.push_front(id);
                self.items.push(None);
                (self.items.len() - 1) as u32
            }
            None => {
                self.items.push(None);
                (self.items.len() - 1) as u32
            }
        };
        self.items[id as usize] = Some(t);
        Some(id)
    }
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.items.get(id as usize)?.as_ref()
    }
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.items.get_mut(id as usize)?.as_mut()
    }
    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let t = self.items.get_mut(id as usize)?.take()?;
        self.free.push_back(id);
        Some(t)
    }
    pub(crate) fn len(&self) -> usize {
        self.items.len() - 1 - self.free.len()
    }
    /// The handles in use, in order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.items.iter().enumerate().filter(|(_, t)| t.is_some()).map(|(i, _)| i as u32)
    }
}

pub(crate) struct Pd {
    pub refs: u32,
}

/// An XRC domain: XRC SRQs and XRC target QPs belong to one.
pub(crate) struct Xrcd {
    /// SRQs and target QPs in it (dealloc is EBUSY while non-zero).
    pub refs: u32,
}

pub(crate) struct Ah {
    pub pd: PdId,
    pub attr: AhAttr,
    pub dst: IpAddr,
}

/// Everything but the QPs: what requester, responder and completer share.
pub(crate) struct EngineShared<M> {
    pub cfg: EngineConfig,
    pub mem: M,
    pub keys: KeyTable,
    pub pds: Slab<Pd>,
    pub cqs: Slab<Cq>,
    pub srqs: Slab<Srq>,
    pub xrcds: Slab<Xrcd>,
    pub ahs: Slab<Ah>,
    pub events: VecDeque<Event>,
    pub counters: Counters,
    /// The latest time an input told the engine (never goes back): the completion
    /// timestamp of every completion produced while handling it.
    pub clock: Nanos,
    /// Completions stored in any CQ since the engine was made (see
    /// [`super::Engine::completions_made`]).
    pub completions_made: u64,
    /// ICRC prefixes of the flows packets were last sent on (local address to a peer, from a
    /// QP's source port).
    pub icrc_tx: IcrcFlows,
    /// The fault plan (`Engine::set_fault_plan`); `None`, the rule, costs one test per
    /// datagram, packet, post and completion.
    pub faults: Option<Box<super::faults::Injector>>,
    /// Tests' switch of the short paths (built with the `fuzzing` feature only).
    #[cfg(feature = "fuzzing")]
    pub short: ShortSwitch,
}

/// Tests' switch of the short paths ([`super::Engine::set_short_paths`]): off, every packet
/// takes the general path, so a test can run the same traffic both ways and compare; `taken`
/// counts the packets a short path handled.
#[cfg(feature = "fuzzing")]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShortSwitch {
    pub off: bool,
    pub taken: u64,
}

impl<M> EngineShared<M> {
    /// Delivers a completion; `false` if the CQ overflowed.
    pub fn push_wc(&mut self, cq: CqId, mut wc: WorkCompletion, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(cq) else { return false };
        wc.timestamp = self.clock;
        match c.push(wc, solicited) {
            PushOutcome::Stored { notify } => {
                self.completions_made += 1;
                if notify {
                    self.events.push_back(Event::Completion(cq));
                }
                true
            }
            PushOutcome::Overflow { first } => {
                self.counters.cq_overflows += 1;
                if first {
                    self.async_event(AsyncEventType::CqErr, AsyncElement::Cq(cq));
                }
                false
            }
        }
    }

    /// Whether a short path may run: always, but in a test that switched them off.
    #[inline(always)]
    pub fn short_paths_on(&self) -> bool {
        #[cfg(feature = "fuzzing")]
        return !self.short.off;
        #[cfg(not(feature = "fuzzing"))]
        true
    }

    /// Counts a packet a short path handled (tests only).
    #[inline(always)]
    pub fn short_path_taken(&mut self) {
        #[cfg(feature = "fuzzing")]
        {
            self.short.taken += 1;
        }
    }

    /// Moves the engine clock to `now` (a late caller's older `now` leaves it where it is).
    pub fn tick(&mut self, now: Nanos) {
        self.clock = self.clock.max(now);
    }

    pub fn async_event(&mut self, kind: AsyncEventType, element: AsyncElement) {
        self.events.push_back(Event::Async(AsyncEvent { kind, element }));
    }

    /// IP fields the ICRC of a packet we send to `dst` covers (IPv4: ID 0 + DF, as the
    /// transport's sockets send).
    pub fn tx_ip(&self, dst: IpAddr) -> Option<IpFields> {
        match (self.cfg.local_addr, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(IpFields::v4_df(s, d)),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(IpFields::v6(s, d)),
            _ => None,
        }
    }
}
