-- The back office's sales report: paid seats per sale and level.
CREATE INDEX paid_bookings_by_sale_level ON paid_bookings (sale, level);
