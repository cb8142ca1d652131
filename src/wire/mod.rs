//! Wire layer: RoCEv2 headers, opcode table, PSN, ICRC. No I/O, no allocation on parse.
#![forbid(unsafe_code)]

pub mod icrc;
