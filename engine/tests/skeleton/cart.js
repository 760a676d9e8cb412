import { EventEmitter } from 'node:events';
import { formatCurrency, roundCents } from './money.js';
import { lookupCoupon } from './coupons.js';

const DEFAULT_TAX_RATE = 0.08;
const MAX_QUANTITY_PER_LINE = 99;

export class CartError extends Error {
  constructor(message, code) {
    super(message);
    this.code = code;
  }
}

export class ShoppingCart extends EventEmitter {
  taxRate = DEFAULT_TAX_RATE;

  constructor(customerId, currency = 'USD') {
    super();
    this.customerId = customerId;
    this.currency = currency;
    this.lines = new Map();
    this.appliedCoupon = null;
  }

  get itemCount() {
    const quantities = [...this.lines.values()].map((line) => line.quantity);
    return quantities.reduce((sum, qty) => sum + qty, 0);
  }

  hasSku(sku) {
    const line = this.lines.get(sku);
    return line !== undefined && line.quantity > 0;
  }

  addItem(product, quantity = 1) {
    if (!product || typeof product.sku !== 'string') {
      throw new CartError('product must have a sku', 'INVALID_PRODUCT');
    }
    if (!Number.isInteger(quantity) || quantity <= 0) {
      throw new CartError(`bad quantity ${quantity}`, 'INVALID_QUANTITY');
    }
    const previousLine = this.lines.get(product.sku);
    const mergedQuantity = (previousLine ? previousLine.quantity : 0) + quantity;
    if (mergedQuantity > MAX_QUANTITY_PER_LINE) {
      throw new CartError(
        `at most ${MAX_QUANTITY_PER_LINE} of ${product.sku} per order`,
        'QUANTITY_LIMIT',
      );
    }
    const updatedLine = {
      sku: product.sku,
      title: product.title ?? product.sku,
      unitPrice: roundCents(product.price),
      quantity: mergedQuantity,
    };
    this.lines.set(product.sku, updatedLine);
    this.emit('change', { type: previousLine ? 'update' : 'add', line: updatedLine });
    return updatedLine;
  }

  removeItem(sku) {
    const removed = this.lines.delete(sku);
    if (removed) {
      this.emit('change', { type: 'remove', sku });
    }
    return removed;
  }

  subtotal() {
    let total = 0;
    for (const line of this.lines.values()) {
      total += line.unitPrice * line.quantity;
    }
    return roundCents(total);
  }

  async checkout(paymentGateway, { couponCode, shippingCents = 0 } = {}) {
    if (this.lines.size === 0) {
      throw new CartError('cannot check out an empty cart', 'EMPTY_CART');
    }
    let discountCents = 0;
    if (couponCode) {
      const resolvedCoupon = await lookupCoupon(couponCode);
      if (!resolvedCoupon || resolvedCoupon.expiresAt < Date.now()) {
        throw new CartError(`coupon ${couponCode} is not valid`, 'BAD_COUPON');
      }
      this.appliedCoupon = resolvedCoupon;
      discountCents = Math.min(this.subtotal(), resolvedCoupon.amountCents);
    }
    const taxableCents = this.subtotal() - discountCents;
    const grandTotalCents = roundCents(taxableCents * (1 + this.taxRate) + shippingCents);
    const chargeReceipt = await paymentGateway.charge({
      customerId: this.customerId,
      amount: grandTotalCents,
      currency: this.currency,
      description: `${this.itemCount} items`,
    });
    this.emit('checkout', {
      receiptId: chargeReceipt.id,
      total: formatCurrency(grandTotalCents, this.currency),
    });
    this.lines.clear();
    this.appliedCoupon = null;
    return chargeReceipt;
  }
}

export function createCart(customerId, options = {}) {
  const cart = new ShoppingCart(customerId, options.currency);
  if (typeof options.taxRate === 'number') {
    cart.taxRate = options.taxRate;
  }
  return cart;
}
