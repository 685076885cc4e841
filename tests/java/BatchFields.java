// Every field the Java client sets on batched messages, produced then consumed with the
// official Pulsar Java client: key, ordering key, properties, event time, a null value
// (getData() gives null), sequence id. Prints one line per message as consumed; the test
// compares them. With a third argument, only one half runs: "produce" (the subscription is
// made first, so the messages wait for it) or "consume" (e.g. on another sidecar, after the
// first one stopped).
// Usage: java -cp <classpath> BatchFields.java pulsar://HOST:PORT TOPIC [produce|consume]
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

public class BatchFields {
    public static void main(String[] args) throws Exception {
        String half = args.length > 2 ? args[2] : "both";
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0])
                .operationTimeout(30, TimeUnit.SECONDS).build();
             Consumer<byte[]> consumer = client.newConsumer().topic(args[1])
                    .subscriptionName("fields")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .subscribe()) {
            if (!half.equals("consume")) {
            try (Producer<byte[]> producer = client.newProducer().topic(args[1])
                    .producerName("java-batch").enableBatching(true)
                    // one batch of the three, sent when full: a 100-ms delay split it in
                    // two on a busy machine
                    .batchingMaxMessages(3)
                    .batchingMaxPublishDelay(10, TimeUnit.SECONDS).create()) {
                List<CompletableFuture<MessageId>> sent = new ArrayList<>();
                sent.add(producer.newMessage().key("k1").orderingKey("o1".getBytes())
                        .property("p", "v").eventTime(1_700_000_000_123L).sequenceId(100)
                        .value("hello".getBytes()).sendAsync());
                sent.add(producer.newMessage().key("gone").value(null).sequenceId(101)
                        .sendAsync());
                sent.add(producer.newMessage().value(new byte[0]).sequenceId(102).sendAsync());
                for (CompletableFuture<MessageId> f : sent) {
                    f.get(30, TimeUnit.SECONDS);
                }
            }
            }
            if (half.equals("produce")) {
                return;
            }
            for (int i = 0; i < 3; i++) {
                Message<byte[]> msg = consumer.receive(30, TimeUnit.SECONDS);
                if (msg == null) {
                    throw new IllegalStateException("no message within 30 s");
                }
                byte[] data = msg.getData();
                String ordering = msg.hasOrderingKey()
                        ? new String(msg.getOrderingKey(), StandardCharsets.UTF_8) : "-";
                System.out.println("msg key=" + (msg.hasKey() ? msg.getKey() : "-")
                        + " ordering=" + ordering
                        + " data=" + (data == null ? "null" : new String(data, StandardCharsets.UTF_8))
                        + " props=" + new TreeMap<>(msg.getProperties())
                        + " event=" + msg.getEventTime()
                        + " seq=" + msg.getSequenceId()
                        + " producer=" + msg.getProducerName());
                consumer.acknowledge(msg);
            }
        }
    }
}
