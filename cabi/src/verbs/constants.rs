//! The header's constants; every one is in `CONSTANTS` for the layout test.

// ------------------------------------------------------------------------------------------
// Constants. Every one is listed in `CONSTANTS` so the layout test checks its value against
// the header.
// ------------------------------------------------------------------------------------------

macro_rules! constants {
    ($($name:ident = $val:expr;)*) => {
        $(pub const $name: u64 = $val;)*
        /// Every constant above, by its C name, for the layout test.
        pub const CONSTANTS: &[(&str, u64)] = &[$((stringify!($name), $val)),*];
    };
}

constants! {
    IBV_NODE_CA = 1;
    IBV_TRANSPORT_IB = 0;

    IBV_PORT_DOWN = 1;
    IBV_PORT_ACTIVE = 4;
    IBV_MTU_256 = 1;
    IBV_MTU_1024 = 3;
    IBV_MTU_4096 = 5;
    IBV_LINK_LAYER_ETHERNET = 2;
    IBV_ATOMIC_HCA = 1;

    IBV_DEVICE_BAD_PKEY_CNTR = 1 << 1;
    IBV_DEVICE_BAD_QKEY_CNTR = 1 << 2;
    IBV_DEVICE_AUTO_PATH_MIG = 1 << 4;
    IBV_DEVICE_CHANGE_PHY_PORT = 1 << 5;
    IBV_DEVICE_UD_AV_PORT_ENFORCE = 1 << 6;
    IBV_DEVICE_PORT_ACTIVE_EVENT = 1 << 10;
    IBV_DEVICE_SYS_IMAGE_GUID = 1 << 11;
    IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12;
    IBV_DEVICE_SRQ_RESIZE = 1 << 13;
    IBV_DEVICE_MEM_WINDOW = 1 << 17;
    IBV_DEVICE_MEM_MGT_EXTENSIONS = 1 << 21;
    IBV_DEVICE_MEM_WINDOW_TYPE_2B = 1 << 24;
    IBV_DEVICE_XRC = 1 << 20;

    IBV_GID_TYPE_ROCE_V2 = 2;
    IBV_PORT_CM_SUP = 1 << 16;
    IBV_PORT_IP_BASED_GIDS = 1 << 26;

    IBV_QPT_RC = 2;
    IBV_QPT_UC = 3;
    IBV_QPT_UD = 4;
    IBV_QPT_RAW_PACKET = 8;
    IBV_QPT_XRC_SEND = 9;
    IBV_QPT_XRC_RECV = 10;
    IBV_QPT_DRIVER = 0xff;

    IBV_QPS_RESET = 0;
    IBV_QPS_INIT = 1;
    IBV_QPS_RTR = 2;
    IBV_QPS_RTS = 3;
    IBV_QPS_ERR = 6;

    IBV_QP_STATE = 1;
    IBV_QP_CUR_STATE = 1 << 1;
    IBV_QP_ACCESS_FLAGS = 1 << 3;
    IBV_QP_PKEY_INDEX = 1 << 4;
    IBV_QP_PORT = 1 << 5;
    IBV_QP_QKEY = 1 << 6;
    IBV_QP_AV = 1 << 7;
    IBV_QP_PATH_MTU = 1 << 8;
    IBV_QP_TIMEOUT = 1 << 9;
    IBV_QP_RETRY_CNT = 1 << 10;
    IBV_QP_RNR_RETRY = 1 << 11;
    IBV_QP_RQ_PSN = 1 << 12;
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13;
    IBV_QP_MIN_RNR_TIMER = 1 << 15;
    IBV_QP_SQ_PSN = 1 << 16;
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17;
    IBV_QP_ALT_PATH = 1 << 14;
    IBV_QP_CAP = 1 << 19;
    IBV_QP_DEST_QPN = 1 << 20;
    IBV_QP_RATE_LIMIT = 1 << 25;

    IBV_QP_INIT_ATTR_PD = 1;
    IBV_QP_INIT_ATTR_XRCD = 1 << 1;
    IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2;
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3;
    IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4;
    IBV_QP_INIT_ATTR_RX_HASH = 1 << 5;
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6;

    IBV_QP_EX_WITH_RDMA_WRITE = 1;
    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1;
    IBV_QP_EX_WITH_SEND = 1 << 2;
    IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3;
    IBV_QP_EX_WITH_RDMA_READ = 1 << 4;
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5;
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6;
    IBV_QP_EX_WITH_LOCAL_INV = 1 << 7;
    IBV_QP_EX_WITH_BIND_MW = 1 << 8;
    IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9;
    IBV_QP_EX_WITH_TSO = 1 << 10;
    IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12;

    IBV_WR_RDMA_WRITE = 0;
    IBV_WR_RDMA_WRITE_WITH_IMM = 1;
    IBV_WR_SEND = 2;
    IBV_WR_SEND_WITH_IMM = 3;
    IBV_WR_RDMA_READ = 4;
    IBV_WR_ATOMIC_CMP_AND_SWP = 5;
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6;
    IBV_WR_LOCAL_INV = 7;
    IBV_WR_BIND_MW = 8;
    IBV_WR_SEND_WITH_INV = 9;
    IBV_WR_TSO = 10;
    IBV_WR_DRIVER1 = 11;
    IBV_WR_ATOMIC_WRITE = 15;

    IBV_SEND_FENCE = 1;
    IBV_SEND_SIGNALED = 1 << 1;
    IBV_SEND_SOLICITED = 1 << 2;
    IBV_SEND_INLINE = 1 << 3;
    IBV_SEND_IP_CSUM = 1 << 4;

    IBV_WC_SUCCESS = 0;
    IBV_WC_GENERAL_ERR = 21;
    IBV_WC_TM_RNDV_INCOMPLETE = 23;
    IBV_WC_SEND = 0;
    IBV_WC_RDMA_WRITE = 1;
    IBV_WC_LOCAL_INV = 6;
    IBV_WC_ATOMIC_WRITE = 9;
    IBV_WC_RECV = 128;
    IBV_WC_RECV_RDMA_WITH_IMM = 129;
    IBV_WC_GRH = 1;
    IBV_WC_WITH_IMM = 1 << 1;
    IBV_WC_WITH_INV = 1 << 3;

    IBV_WC_EX_WITH_BYTE_LEN = 1;
    IBV_WC_EX_WITH_IMM = 1 << 1;
    IBV_WC_EX_WITH_QP_NUM = 1 << 2;
    IBV_WC_EX_WITH_SRC_QP = 1 << 3;
    IBV_WC_EX_WITH_SLID = 1 << 4;
    IBV_WC_EX_WITH_SL = 1 << 5;
    IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6;
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7;
    IBV_WC_EX_WITH_CVLAN = 1 << 8;
    IBV_WC_EX_WITH_FLOW_TAG = 1 << 9;
    IBV_WC_EX_WITH_TM_INFO = 1 << 10;
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11;

    IBV_VALUES_MASK_RAW_CLOCK = 1;

    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1;
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1;

    IBV_REREG_MR_CHANGE_TRANSLATION = 1;
    IBV_REREG_MR_CHANGE_PD = 1 << 1;
    IBV_REREG_MR_CHANGE_ACCESS = 1 << 2;
    IBV_REREG_MR_ERR_INPUT = (-1i64) as u64;
    IBV_REREG_MR_ERR_CMD = (-4i64) as u64;

    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1;
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1;
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1;
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1;

    IBV_SRQ_INIT_ATTR_TYPE = 1;
    IBV_SRQ_INIT_ATTR_PD = 1 << 1;
    IBV_SRQ_INIT_ATTR_XRCD = 1 << 2;
    IBV_SRQ_INIT_ATTR_CQ = 1 << 3;
    IBV_SRQ_INIT_ATTR_TM = 1 << 4;
    IBV_XRCD_INIT_ATTR_FD = 1;
    IBV_XRCD_INIT_ATTR_OFLAGS = 1 << 1;
    IBV_QP_OPEN_ATTR_NUM = 1;
    IBV_QP_OPEN_ATTR_XRCD = 1 << 1;
    IBV_QP_OPEN_ATTR_CONTEXT = 1 << 2;
    IBV_QP_OPEN_ATTR_TYPE = 1 << 3;
    IBV_SRQT_BASIC = 0;
    IBV_SRQT_XRC = 1;
    IBV_SRQT_TM = 2;
    IBV_SRQ_MAX_WR = 1;
    IBV_SRQ_LIMIT = 1 << 1;

    IBV_MW_TYPE_1 = 1;
    IBV_MW_TYPE_2 = 2;

    IBV_ACCESS_LOCAL_WRITE = 1;
    IBV_ACCESS_REMOTE_WRITE = 1 << 1;
    IBV_ACCESS_REMOTE_READ = 1 << 2;
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3;
    IBV_ACCESS_MW_BIND = 1 << 4;
    IBV_ACCESS_ZERO_BASED = 1 << 5;
    IBV_ACCESS_ON_DEMAND = 1 << 6;
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20;

    IBV_ADVISE_MR_ADVICE_PREFETCH = 0;
    IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1;
    IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2;
    IBV_ADVISE_MR_FLAG_FLUSH = 1;
    IBV_ODP_SUPPORT = 1;
    IBV_ODP_SUPPORT_IMPLICIT = 1 << 1;
    IBV_ODP_SUPPORT_SEND = 1;
    IBV_ODP_SUPPORT_RECV = 1 << 1;
    IBV_ODP_SUPPORT_WRITE = 1 << 2;
    IBV_ODP_SUPPORT_READ = 1 << 3;
    IBV_ODP_SUPPORT_ATOMIC = 1 << 4;
    IBV_ODP_SUPPORT_SRQ_RECV = 1 << 5;

    IBV_EVENT_CQ_ERR = 0;
    IBV_EVENT_QP_FATAL = 1;
    IBV_EVENT_QP_REQ_ERR = 2;
    IBV_EVENT_QP_ACCESS_ERR = 3;
    IBV_EVENT_COMM_EST = 4;
    IBV_EVENT_SQ_DRAINED = 5;
    IBV_EVENT_PATH_MIG = 6;
    IBV_EVENT_PATH_MIG_ERR = 7;
    IBV_EVENT_DEVICE_FATAL = 8;
    IBV_EVENT_PORT_ACTIVE = 9;
    IBV_EVENT_PORT_ERR = 10;
    IBV_EVENT_LID_CHANGE = 11;
    IBV_EVENT_PKEY_CHANGE = 12;
    IBV_EVENT_SM_CHANGE = 13;
    IBV_EVENT_SRQ_ERR = 14;
    IBV_EVENT_SRQ_LIMIT_REACHED = 15;
    IBV_EVENT_QP_LAST_WQE_REACHED = 16;
    IBV_EVENT_CLIENT_REREGISTER = 17;
    IBV_EVENT_GID_CHANGE = 18;
    IBV_EVENT_WQ_FATAL = 19;

    IBV_RATE_MAX = 0;
    IBV_RATE_2_5_GBPS = 2;
    IBV_RATE_10_GBPS = 3;
    IBV_RATE_30_GBPS = 4;
    IBV_RATE_5_GBPS = 5;
    IBV_RATE_20_GBPS = 6;
    IBV_RATE_40_GBPS = 7;
    IBV_RATE_60_GBPS = 8;
    IBV_RATE_80_GBPS = 9;
    IBV_RATE_120_GBPS = 10;
    IBV_RATE_14_GBPS = 11;
    IBV_RATE_56_GBPS = 12;
    IBV_RATE_112_GBPS = 13;
    IBV_RATE_168_GBPS = 14;
    IBV_RATE_25_GBPS = 15;
    IBV_RATE_100_GBPS = 16;
    IBV_RATE_200_GBPS = 17;
    IBV_RATE_300_GBPS = 18;
    IBV_RATE_28_GBPS = 19;
    IBV_RATE_50_GBPS = 20;
    IBV_RATE_400_GBPS = 21;
    IBV_RATE_600_GBPS = 22;
    IBV_RATE_800_GBPS = 23;
    IBV_RATE_1200_GBPS = 24;

    IBV_FORK_DISABLED = 0;
    IBV_FORK_ENABLED = 1;
    IBV_FORK_UNNEEDED = 2;
}

/// `enum ibv_gid_type_sysfs` (rdma-core private driver.h): what `ibv_query_gid_type` reports.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;
/// Port width/speed codes as ibv_devinfo decodes them (IB PortInfo encoding; no header enum).
pub const IB_WIDTH_4X: u8 = 2;
pub const IB_SPEED_EDR: u8 = 32;
/// `IBV_WR_FLUSH` (rdma-core 45+, not in the 44 header).
pub const IBV_WR_FLUSH: u32 = 14;

/// `ibv_port_attr` size of old binaries (no `port_cap_flags2`).
pub const COMPAT_PORT_ATTR_SIZE: usize = 48;
