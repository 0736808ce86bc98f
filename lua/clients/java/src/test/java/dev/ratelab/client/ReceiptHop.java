package dev.ratelab.client;

/**
 * A job queue's Java worker, for the cross-language test: refunds the
 * receipt JSON it is given (made by another language's client, GCRA 5 per
 * second, burst 10, on the caller's clock {@code now}), takes 3 units, and
 * prints {@code {"remaining":..,"taken":..,"receipt":<its receipt's JSON>}}.
 *
 * <pre>
 * java -cp ... dev.ratelab.client.ReceiptHop redis://127.0.0.1:6379/ prefix now '{"ratelab_receipt":1,...}'
 * </pre>
 */
public final class ReceiptHop {
    private ReceiptHop() {}

    public static void main(String[] args) {
        long now = Long.parseLong(args[2]);
        try (Redis redis = Redis.connect(args[0])) {
            Limiter limiter = Limiter.builder(redis, "gcra", Quota.perSecond(5).withBurst(10)).prefix(args[1])
                    .clock(() -> now).timeout(java.time.Duration.ofSeconds(5)).build();
            Decision refunded = limiter.refund(limiter.receiptFromJson(args[3]));
            Decision taken = limiter.check("job", 3);
            System.out.println("{\"remaining\":" + refunded.remaining() + ",\"taken\":" + taken.remaining()
                    + ",\"receipt\":" + taken.receipt().orElseThrow().toJson() + "}");
        }
        System.exit(0);
    }
}
