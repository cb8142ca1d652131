//! Wire layer: RoCEv2 headers, opcode table, PSN, ICRC. No I/O.
#![forbid(unsafe_code)]
