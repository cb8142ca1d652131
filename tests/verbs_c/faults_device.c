/* Device faults of a fault plan (URXE_FAULTS, docs/faults.md), seen through the verbs API as
 * a program sees a real device's: run with
 *
 *   URXE_FAULTS='port-down=300ms:at=200ms; qp-fatal:at=900ms; cq-overrun:at=1000ms; device-fatal:at=1100ms'
 *
 * and it expects, in this order on the async fd: IBV_EVENT_PORT_ERR for port 1 (ibv_query_port
 * says DOWN meanwhile), IBV_EVENT_PORT_ACTIVE (ACTIVE again), IBV_EVENT_QP_FATAL for its QP
 * (which ibv_query_qp then shows in IBV_QPS_ERR, its receive WR flushed with
 * IBV_WC_WR_FLUSH_ERR), IBV_EVENT_CQ_ERR for its CQ, IBV_EVENT_DEVICE_FATAL.
 */
#include "common.h"

/* The next async event within `ms`, acknowledged; 0 on success, -1 on timeout. */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ev, int ms)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return -1;
	if (ibv_get_async_event(ctx, ev))
		return -1;
	ibv_ack_async_event(ev);
	return 0;
}

/* The next event that is not IBV_EVENT_COMM_EST / LAST_WQE (not what this test is about). */
static int expect_event(struct ibv_context *ctx, enum ibv_event_type want, struct ibv_async_event *ev)
{
	for (int i = 0; i < 8; i++) {
		if (next_event(ctx, ev, 5000))
			break;
		if (ev->event_type == want)
			return 1;
		printf("note: event %s while waiting for %s\n", ibv_event_type_str(ev->event_type),
		       ibv_event_type_str(want));
	}
	return 0;
}

int main(void)
{
	struct dev d;
	struct ibv_async_event ev;
	struct ibv_port_attr pa;
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct ibv_wc wc;
	static uint8_t buf[64];

	g_role = "faults_device";
	start_watchdog(WATCHDOG_S);
	open_dev(&d, "urxe0", 1);
	struct ibv_pd *pd = ibv_alloc_pd(d.ctx);
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!pd || !cq || !mr)
		die("pd/cq/mr");
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp)
		die("ibv_create_qp");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	post_recv_one(qp, buf, sizeof(buf), mr->lkey, 42);

	check(expect_event(d.ctx, IBV_EVENT_PORT_ERR, &ev), "port_err", "no IBV_EVENT_PORT_ERR");
	check(ev.element.port_num == 1, "port_err_port", "port %d", ev.element.port_num);
	check(ibv_query_port(d.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_DOWN, "port_down", "state %d", pa.state);
	check(expect_event(d.ctx, IBV_EVENT_PORT_ACTIVE, &ev), "port_active_event", "no IBV_EVENT_PORT_ACTIVE");
	check(ibv_query_port(d.ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "port_up", "state %d", pa.state);

	check(expect_event(d.ctx, IBV_EVENT_QP_FATAL, &ev), "qp_fatal", "no IBV_EVENT_QP_FATAL");
	check(ev.element.qp == qp, "qp_fatal_qp", "element %p, qp %p", (void *)ev.element.qp, (void *)qp);
	memset(&attr, 0, sizeof(attr));
	check(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR, "qp_in_error",
	      "state %d", attr.qp_state);
	check(poll_one(cq, &wc, 2000) == 1 && wc.wr_id == 42 && wc.status == IBV_WC_WR_FLUSH_ERR, "recv_flushed",
	      "wr_id %" PRIu64 " status %s", wc.wr_id, ibv_wc_status_str(wc.status));

	check(expect_event(d.ctx, IBV_EVENT_CQ_ERR, &ev), "cq_err", "no IBV_EVENT_CQ_ERR");
	check(ev.element.cq == cq, "cq_err_cq", "element %p, cq %p", (void *)ev.element.cq, (void *)cq);
	check(expect_event(d.ctx, IBV_EVENT_DEVICE_FATAL, &ev), "device_fatal", "no IBV_EVENT_DEVICE_FATAL");

	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(d.ctx);
	return finish();
}
