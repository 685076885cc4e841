import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

/**
 * The Java client on stored batches. Args: service URL, compacted topic, positions topic.
 * Prints "compacted KEY VALUE BATCH_INDEX" for each message a readCompacted reader gets
 * from the earliest (until hasMessageAvailable is false); then, on the positions topic
 * (already holding batches), the first message of a reader started at its 5th message
 * ("exclusive VALUE", "inclusive VALUE") and a consumer's first message after a seek to
 * its 3rd ("seek VALUE").
 */
public class EntryPositions {
    public static void main(String[] args) throws Exception {
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0]).build()) {
            try (Reader<byte[]> reader = client.newReader().topic(args[1])
                    .startMessageId(MessageId.earliest).readCompacted(true).create()) {
                while (reader.hasMessageAvailable()) {
                    Message<byte[]> msg = reader.readNext(20, TimeUnit.SECONDS);
                    System.out.println("compacted " + msg.getKey() + " " + new String(msg.getValue())
                            + " " + ((MessageIdAdv) msg.getMessageId()).getBatchIndex());
                }
            }
            String topic = args[2];
            List<MessageId> ids = new ArrayList<>();
            try (Reader<byte[]> reader = client.newReader().topic(topic)
                    .startMessageId(MessageId.earliest).create()) {
                while (reader.hasMessageAvailable()) {
                    ids.add(reader.readNext(20, TimeUnit.SECONDS).getMessageId());
                }
            }
            try (Reader<byte[]> reader = client.newReader().topic(topic)
                    .startMessageId(ids.get(4)).create()) {
                System.out.println("exclusive " + new String(reader.readNext(20, TimeUnit.SECONDS).getValue()));
            }
            try (Reader<byte[]> reader = client.newReader().topic(topic)
                    .startMessageId(ids.get(4)).startMessageIdInclusive().create()) {
                System.out.println("inclusive " + new String(reader.readNext(20, TimeUnit.SECONDS).getValue()));
            }
            try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("seeker")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                consumer.receive(20, TimeUnit.SECONDS);
                consumer.seek(ids.get(2));
                System.out.println("seek " + new String(consumer.receive(20, TimeUnit.SECONDS).getValue()));
            }
        }
    }
}
