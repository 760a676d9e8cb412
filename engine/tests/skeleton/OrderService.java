package com.example.shop.orders;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.Clock;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Logger;

public class OrderService {

    private static final Logger LOG = Logger.getLogger(OrderService.class.getName());
    private static final BigDecimal FREE_SHIPPING_THRESHOLD = new BigDecimal("50.00");

    private final Map<String, Order> orders = new ConcurrentHashMap<>();
    private final InventoryClient inventory;
    private final Clock clock;
    private int placedCount;

    public record OrderLine(String sku, int quantity, BigDecimal unitPrice) {}

    public record Order(String id, String customerId, List<OrderLine> lines, BigDecimal total,
                        Instant placedAt, boolean shipped) {}

    public interface InventoryClient {
        boolean reserve(String sku, int quantity);

        void release(String sku, int quantity);
    }

    public OrderService(InventoryClient inventory, Clock clock) {
        this.inventory = Objects.requireNonNull(inventory, "inventory");
        this.clock = Objects.requireNonNull(clock, "clock");
    }

    public boolean hasOrder(String orderId) {
        Objects.requireNonNull(orderId, "orderId");
        return orders.containsKey(orderId);
    }

    public Optional<Order> find(String orderId) {
        return Optional.ofNullable(orders.get(orderId));
    }

    public Order placeOrder(String orderId, String customerId, List<OrderLine> lines) {
        if (lines == null || lines.isEmpty()) {
            throw new IllegalArgumentException("an order needs at least one line");
        }
        List<OrderLine> reservedSoFar = new ArrayList<>();
        BigDecimal runningSubtotal = BigDecimal.ZERO;
        for (OrderLine line : lines) {
            if (!inventory.reserve(line.sku(), line.quantity())) {
                for (OrderLine undo : reservedSoFar) {
                    inventory.release(undo.sku(), undo.quantity());
                }
                throw new IllegalStateException("out of stock: " + line.sku());
            }
            reservedSoFar.add(line);
            runningSubtotal = runningSubtotal.add(
                    line.unitPrice().multiply(BigDecimal.valueOf(line.quantity())));
        }
        BigDecimal shippingFee = runningSubtotal.compareTo(FREE_SHIPPING_THRESHOLD) >= 0
                ? BigDecimal.ZERO
                : new BigDecimal("4.99");
        BigDecimal orderTotal = runningSubtotal.add(shippingFee).setScale(2, RoundingMode.HALF_UP);
        Order created = new Order(orderId, customerId, List.copyOf(lines), orderTotal,
                Instant.now(clock), false);
        if (orders.putIfAbsent(orderId, created) != null) {
            reservedSoFar.forEach(l -> inventory.release(l.sku(), l.quantity()));
            throw new IllegalStateException("duplicate order id " + orderId);
        }
        placedCount++;
        LOG.info(() -> "placed order " + orderId + " total " + orderTotal);
        return created;
    }

    public BigDecimal refundUnshipped(String customerId) {
        BigDecimal refundedAmount = BigDecimal.ZERO;
        List<String> cancelledIds = new ArrayList<>();
        for (Order order : orders.values()) {
            if (!order.customerId().equals(customerId) || order.shipped()) {
                continue;
            }
            for (OrderLine line : order.lines()) {
                inventory.release(line.sku(), line.quantity());
            }
            refundedAmount = refundedAmount.add(order.total());
            cancelledIds.add(order.id());
        }
        for (String cancelledId : cancelledIds) {
            orders.remove(cancelledId);
        }
        placedCount -= cancelledIds.size();
        LOG.info(String.format("refunded %s to %s across %d orders",
                refundedAmount, customerId, cancelledIds.size()));
        return refundedAmount;
    }
}
