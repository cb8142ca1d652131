//! UD multicast (rxe_mcast.c): which QPs are attached to which multicast group. A group is
//! named by its GID, which on RoCEv2 is an IP multicast address (IPv4-mapped `::ffff:224.0.0.0/4`
//! or IPv6 `ff00::/8`); a datagram sent to that address with destination QPN
//! [`MULTICAST_QPN`] is delivered to every UD QP attached to it (IBTA §10.5.2.3, rxe_recv.c's
//! `rxe_rcv_mcast_pkt`). The table only records attachments and enforces the device limits; the
//! driver joins and leaves the IP group (see `Engine::attach_mcast`).

use std::net::IpAddr;

use super::types::{Error, Limits, Qpn};

/// Destination QPN of every multicast packet (IBTA §9.2: the "permissive" QP 0xFFFFFF).
pub const MULTICAST_QPN: Qpn = 0xFF_FFFF;

/// Whether `ip` is an IP multicast address (IPv4 224.0.0.0/4, IPv6 ff00::/8): the GIDs
/// `ibv_attach_mcast` accepts (the kernel's `rdma_is_multicast_addr`).
pub fn is_multicast(ip: IpAddr) -> bool {
    ip.is_multicast()
}

/// The groups of one device and their attached QPs.
#[derive(Default, Debug)]
pub(crate) struct McastTable {
    groups: Vec<(IpAddr, Vec<Qpn>)>,
    /// Attachments over all groups (`max_total_mcast_qp_attach`).
    total: u32,
    /// QPs created with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: their own multicast does not come
    /// back to them.
    blocked_self: Vec<Qpn>,
}

impl McastTable {
    /// Attaches `qpn` to `group`. `Ok(true)` if the group is new (the driver must join it),
    /// `Ok(false)` if it existed; attaching an attached QP again changes nothing (rxe). ENOMEM
    /// past `max_mcast_grp` groups, `max_mcast_qp_attach` QPs in one group or
    /// `max_total_mcast_qp_attach` attachments in all.
    pub(crate) fn attach(&mut self, group: IpAddr, qpn: Qpn, l: &Limits) -> Result<bool, Error> {
        let pos = self.groups.iter().position(|(g, _)| *g == group);
        if let Some(i) = pos {
            if self.groups[i].1.contains(&qpn) {
                return Ok(false);
            }
        }
        if self.total >= l.max_total_mcast_qp_attach {
            return Err(Error::NoMemory);
        }
        match pos {
            Some(i) => {
                let qps = &mut self.groups[i].1;
                if qps.len() as u32 >= l.max_mcast_qp_attach {
                    return Err(Error::NoMemory);
                }
                qps.push(qpn);
                self.total += 1;
                Ok(false)
            }
            None => {
                if self.groups.len() as u32 >= l.max_mcast_grp || l.max_mcast_qp_attach == 0 {
                    return Err(Error::NoMemory);
                }
                self.groups.push((group, vec![qpn]));
                self.total += 1;
                Ok(true)
            }
        }
    }

    /// Detaches `qpn` from `group`. `Ok(true)` if that was the group's last QP (the driver
    /// leaves it); EINVAL if the QP is not attached to it (rxe).
    pub(crate) fn detach(&mut self, group: IpAddr, qpn: Qpn) -> Result<bool, Error> {
        let i = self.groups.iter().position(|(g, _)| *g == group).ok_or(Error::Invalid)?;
        let qps = &mut self.groups[i].1;
        let j = qps.iter().position(|&q| q == qpn).ok_or(Error::Invalid)?;
        qps.remove(j);
        self.total -= 1;
        if qps.is_empty() {
            self.groups.remove(i);
            return Ok(true);
        }
        Ok(false)
    }

    /// The `i`th QP attached to `group` (None past the last, or for an unknown group).
    pub(crate) fn member(&self, group: IpAddr, i: usize) -> Option<Qpn> {
        self.groups.iter().find(|(g, _)| *g == group).and_then(|(_, q)| q.get(i).copied())
    }

    /// Whether `group` has any attached QP.
    pub(crate) fn has_group(&self, group: IpAddr) -> bool {
        self.groups.iter().any(|(g, _)| *g == group)
    }

    /// Whether `qpn` is attached to any group (it cannot be destroyed then: EBUSY, as uverbs).
    pub(crate) fn is_attached(&self, qpn: Qpn) -> bool {
        self.groups.iter().any(|(_, q)| q.contains(&qpn))
    }

    /// `qpn` does not receive the multicast it sends itself.
    pub(crate) fn block_self(&mut self, qpn: Qpn) {
        if !self.blocked_self.contains(&qpn) {
            self.blocked_self.push(qpn);
        }
    }

    /// Whether `qpn` refuses its own multicast.
    pub(crate) fn blocks_self(&self, qpn: Qpn) -> bool {
        self.blocked_self.contains(&qpn)
    }

    /// The QP is gone (destroyed, never attached at that point).
    pub(crate) fn forget(&mut self, qpn: Qpn) {
        self.blocked_self.retain(|&q| q != qpn);
    }

    /// The groups, for the driver's bookkeeping and tests.
    pub(crate) fn groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups.iter().map(|(g, _)| *g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(grp: u32, per: u32, total: u32) -> Limits {
        Limits { max_mcast_grp: grp, max_mcast_qp_attach: per, max_total_mcast_qp_attach: total, ..Limits::default() }
    }

    #[test]
    fn first_attach_creates_group_and_last_detach_removes_it() {
        let l = Limits::default();
        let mut t = McastTable::default();
        assert_eq!(t.attach(ip("239.1.1.1"), 0x11, &l), Ok(true));
        assert_eq!(t.attach(ip("239.1.1.1"), 0x12, &l), Ok(false));
        assert_eq!(t.attach(ip("239.1.1.1"), 0x12, &l), Ok(false), "attaching twice is a no-op");
        assert_eq!(t.member(ip("239.1.1.1"), 0), Some(0x11));
        assert_eq!(t.member(ip("239.1.1.1"), 1), Some(0x12));
        assert_eq!(t.member(ip("239.1.1.1"), 2), None);
        assert!(t.is_attached(0x12));
        assert_eq!(t.detach(ip("239.1.1.1"), 0x11), Ok(false));
        assert_eq!(t.detach(ip("239.1.1.1"), 0x11), Err(Error::Invalid));
        assert_eq!(t.detach(ip("239.1.1.1"), 0x12), Ok(true));
        assert!(!t.has_group(ip("239.1.1.1")));
        assert!(!t.is_attached(0x12));
        assert_eq!(t.detach(ip("239.1.1.1"), 0x12), Err(Error::Invalid));
    }

    #[test]
    fn limits_refuse_with_enomem() {
        let mut t = McastTable::default();
        let l = limits(2, 2, 3);
        assert_eq!(t.attach(ip("239.0.0.1"), 1, &l), Ok(true));
        assert_eq!(t.attach(ip("239.0.0.2"), 1, &l), Ok(true));
        assert_eq!(t.attach(ip("239.0.0.3"), 1, &l), Err(Error::NoMemory), "max_mcast_grp");
        assert_eq!(t.attach(ip("239.0.0.1"), 2, &l), Ok(false));
        assert_eq!(t.attach(ip("239.0.0.1"), 3, &l), Err(Error::NoMemory), "max_mcast_qp_attach");
        assert_eq!(t.attach(ip("239.0.0.2"), 2, &l), Err(Error::NoMemory), "max_total_mcast_qp_attach");
        assert_eq!(t.groups().count(), 2);
    }

    #[test]
    fn multicast_addresses_are_recognised() {
        assert!(is_multicast(ip("224.0.0.1")));
        assert!(is_multicast(ip("239.255.1.2")));
        assert!(is_multicast(ip("ff0e::1")));
        assert!(!is_multicast(ip("127.0.0.1")));
        assert!(!is_multicast(ip("fe80::1")));
    }
}
