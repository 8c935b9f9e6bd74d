"""A support bot as a step function: one step per message from a user."""

ORDERS = {"A-1": {"status": "shipped", "amount": 30}, "A-2": {"status": "lost", "amount": 45}}


def lookup(args):
    """The real tools, which the recorder calls live (a replay never does)."""
    return ORDERS[args["order"]]


def refund(args):
    return {"refund_id": "r-" + args["order"], "amount": args["amount"]}


TOOLS = {"orders.lookup": lookup, "payments.refund": refund}


def step(ctx, event):
    if event.kind != "message.append" or event.get("sender") != "user":
        return
    order = event.get("message")["content"].split()[-1]
    ctx.emit("plan.push", item={"step": "answer", "order": order})
    found = ctx.tool("orders.lookup", {"order": order})
    ctx.emit("memory.set", path=["orders", order], value=found["status"])
    if found["status"] == "lost":
        ctx.tool("payments.refund", {"order": order, "amount": found["amount"]}, key="refund-" + order)
        reply = f"Order {order} was lost; we refunded {found['amount']}."
    else:
        reply = f"Order {order} is {found['status']}."
    ctx.emit("plan.pop")
    ctx.emit("message.append", message={"role": "assistant", "content": reply}, sender="bot", receiver="user")
