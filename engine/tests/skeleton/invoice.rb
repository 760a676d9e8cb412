# frozen_string_literal: true

require 'bigdecimal'
require 'bigdecimal/util'
require 'date'
require 'json'

module Billing
  class BillingError < StandardError; end

  LineItem = Struct.new(:description, :quantity, :unit_price, :taxable, keyword_init: true)

  class Invoice
    attr_reader :number, :customer, :issued_on, :due_on, :line_items, :payments

    TAX_RATE = BigDecimal('0.0825')
    LATE_FEE_RATE = BigDecimal('0.015')

    def initialize(number:, customer:, issued_on: Date.today, terms_days: 30)
      @number = number
      @customer = customer
      @issued_on = issued_on
      @due_on = issued_on + terms_days
      @line_items = []
      @payments = []
    end

    def add_line(description, quantity, unit_price, taxable: true)
      raise BillingError, 'quantity must be positive' unless quantity.positive?

      @line_items << LineItem.new(description: description, quantity: quantity,
                                  unit_price: unit_price.to_d, taxable: taxable)
      self
    end

    def paid?
      outstanding = balance_due
      outstanding <= 0
    end

    def subtotal
      line_items.sum(BigDecimal('0')) { |item| item.unit_price * item.quantity }
    end

    def total(as_of: Date.today)
      taxable_portion = line_items.select(&:taxable)
                                  .sum(BigDecimal('0')) { |item| item.unit_price * item.quantity }
      computed_tax = (taxable_portion * TAX_RATE).round(2)
      overdue_days = (as_of - due_on).to_i
      accrued_fee = BigDecimal('0')
      if overdue_days.positive?
        overdue_months = (overdue_days / 30.0).ceil
        accrued_fee = (subtotal * LATE_FEE_RATE * overdue_months).round(2)
      end
      fee_ceiling = (subtotal * BigDecimal('0.25')).round(2)
      accrued_fee = fee_ceiling if accrued_fee > fee_ceiling
      grand_total = subtotal + computed_tax + accrued_fee
      if grand_total.negative?
        raise BillingError, "invoice #{number} has a negative total #{grand_total.to_s('F')}"
      end

      grand_total
    end

    def balance_due(as_of: Date.today)
      total(as_of: as_of) - payments.sum(BigDecimal('0')) { |p| p[:amount] }
    end

    def record_payment(amount, received_on: Date.today, reference: nil)
      payment_amount = amount.to_d
      raise BillingError, 'payment must be positive' unless payment_amount.positive?

      remaining_before = balance_due(as_of: received_on)
      if payment_amount > remaining_before
        overpaid_by = payment_amount - remaining_before
        warn "invoice #{number}: overpayment of #{overpaid_by.to_s('F')} will be credited"
      end
      payment_record = {
        amount: payment_amount,
        received_on: received_on,
        reference: reference || "PAY-#{number}-#{payments.size + 1}"
      }
      payments << payment_record
      if payment_record[:amount] >= remaining_before
        warn "invoice #{number} settled on #{received_on.iso8601}"
      end
      payment_record
    end

    def to_json(*args)
      {
        number: number,
        customer: customer,
        issued_on: issued_on.iso8601,
        due_on: due_on.iso8601,
        total: total.to_s('F'),
        balance_due: balance_due.to_s('F')
      }.to_json(*args)
    end
  end
end
