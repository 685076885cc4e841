// Seed 002's steps with the official Pulsar Java client: produce two messages, then consume
// them with a Shared subscription "demo-sub2" and acknowledge them, then close.
// Usage: java -cp <classpath> Seed002.java pulsar://HOST:PORT TOPIC
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public class Seed002 {
    public static void main(String[] args) throws Exception {
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0])
                .operationTimeout(30, TimeUnit.SECONDS).build()) {
            try (Producer<byte[]> producer = client.newProducer().topic(args[1]).create()) {
                producer.send("hello-pulsar1".getBytes());
                producer.send("hello-pulsar2".getBytes());
            }
            try (Consumer<byte[]> consumer = client.newConsumer().topic(args[1])
                    .subscriptionName("demo-sub2").subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .subscribe()) {
                for (int i = 0; i < 2; i++) {
                    Message<byte[]> msg = consumer.receive(30, TimeUnit.SECONDS);
                    if (msg == null) {
                        throw new IllegalStateException("no message within 30 s");
                    }
                    System.out.println("received " + new String(msg.getData()) + " "
                            + msg.getMessageId());
                    consumer.acknowledge(msg);
                }
            }
        }
    }
}
