import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * Two Failover consumers with the Java client's ConsumerEventListener: prints every
 * ACTIVE_CONSUMER_CHANGE the client reports ("event NAME active|inactive"), at each step:
 * "step a-joined", "step b-joined", "step a-closed". Args: service URL, topic.
 */
public class FailoverEvents {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        String topic = args[1];
        BlockingQueue<String> events = new LinkedBlockingQueue<>();
        ConsumerEventListener listener = new ConsumerEventListener() {
            @Override
            public void becameActive(Consumer<?> consumer, int partitionId) {
                events.add(consumer.getConsumerName() + " active");
            }

            @Override
            public void becameInactive(Consumer<?> consumer, int partitionId) {
                events.add(consumer.getConsumerName() + " inactive");
            }
        };
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).build()) {
            Consumer<byte[]> a = client.newConsumer().topic(topic).subscriptionName("fo")
                    .subscriptionType(SubscriptionType.Failover).consumerName("a")
                    .consumerEventListener(listener).subscribe();
            drain(events, "a-joined", "a active");
            Consumer<byte[]> b = client.newConsumer().topic(topic).subscriptionName("fo")
                    .subscriptionType(SubscriptionType.Failover).consumerName("b")
                    .consumerEventListener(listener).subscribe();
            drain(events, "b-joined", "b inactive");
            a.close();
            drain(events, "a-closed", "b active");
            b.close();
        }
    }

    /** Print events until {@code until} arrived (or 30 s passed), then the step. */
    private static void drain(BlockingQueue<String> events, String step, String until)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (System.nanoTime() < deadline) {
            String event = events.poll(200, TimeUnit.MILLISECONDS);
            if (event != null) {
                System.out.println("event " + event);
                if (event.equals(until)) {
                    break;
                }
            }
        }
        System.out.println("step " + step);
    }
}
