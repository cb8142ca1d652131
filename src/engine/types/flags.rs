//! Bit sets with the verbs bit values (access, send, WC flags; QP and SRQ attribute masks).

use std::fmt;

bitflags_u32! {
    /// `enum ibv_access_flags`.
    AccessFlags {
        LOCAL_WRITE = 1;
        REMOTE_WRITE = 1 << 1;
        REMOTE_READ = 1 << 2;
        REMOTE_ATOMIC = 1 << 3;
        MW_BIND = 1 << 4;
        ZERO_BASED = 1 << 5;
        ON_DEMAND = 1 << 6;
        HUGETLB = 1 << 7;
        FLUSH_GLOBAL = 1 << 8;
        FLUSH_PERSISTENT = 1 << 9;
        RELAXED_ORDERING = 1 << 20;
    }
}

bitflags_u32! {
    /// `enum ibv_send_flags`.
    SendFlags {
        FENCE = 1;
        SIGNALED = 1 << 1;
        SOLICITED = 1 << 2;
        INLINE = 1 << 3;
        IP_CSUM = 1 << 4;
    }
}

bitflags_u32! {
    /// `enum ibv_qp_attr_mask`.
    QpAttrMask {
        STATE = 1;
        CUR_STATE = 1 << 1;
        EN_SQD_ASYNC_NOTIFY = 1 << 2;
        ACCESS_FLAGS = 1 << 3;
        PKEY_INDEX = 1 << 4;
        PORT = 1 << 5;
        QKEY = 1 << 6;
        AV = 1 << 7;
        PATH_MTU = 1 << 8;
        TIMEOUT = 1 << 9;
        RETRY_CNT = 1 << 10;
        RNR_RETRY = 1 << 11;
        RQ_PSN = 1 << 12;
        MAX_QP_RD_ATOMIC = 1 << 13;
        ALT_PATH = 1 << 14;
        MIN_RNR_TIMER = 1 << 15;
        SQ_PSN = 1 << 16;
        MAX_DEST_RD_ATOMIC = 1 << 17;
        PATH_MIG_STATE = 1 << 18;
        CAP = 1 << 19;
        DEST_QPN = 1 << 20;
        RATE_LIMIT = 1 << 25;
    }
}

bitflags_u32! {
    /// `enum ibv_wc_flags`.
    WcFlags {
        GRH = 1;
        WITH_IMM = 1 << 1;
        IP_CSUM_OK = 1 << 2;
        WITH_INV = 1 << 3;
        TM_SYNC_REQ = 1 << 4;
        TM_MATCH = 1 << 5;
        TM_DATA_VALID = 1 << 6;
    }
}

bitflags_u32! {
    /// `enum ibv_srq_attr_mask`.
    SrqAttrMask {
        MAX_WR = 1;
        LIMIT = 1 << 1;
    }
}
