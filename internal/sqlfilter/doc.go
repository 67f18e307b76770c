// Package sqlfilter parses and evaluates SQL filter expressions, the
// JMS-selector-like conditions of the AMQP Filter Expressions spec that a
// consumer of a RabbitMQ 4.2+ stream attaches with, such as
// "p.subject LIKE 'order.%' AND region IN ('eu', 'us')". Parse refuses what
// RabbitMQ would refuse, with a SyntaxError that names the column, so that a
// subscription fails before it reaches a broker; Match decides a message as
// RabbitMQ would, so that the in-process broker filters a stream alike.
//
// The reference is RabbitMQ's own grammar and evaluator (its
// rabbit_amqp_sql lexer and parser and rabbit_amqp_filter_sql), where they
// differ from the spec. That subset: upper-case reserved words; the header
// section's priority (h.), the properties section (p.) and application
// properties (a., or unqualified); integer, decimal, approximate, boolean,
// string and binary constants; regular and [delimited] identifiers; NOT,
// AND, OR with three-valued logic; comparisons; + - * / %; IS [NOT] NULL,
// [NOT] LIKE with ESCAPE, [NOT] IN; and UTC(). No BETWEEN (RabbitMQ removed
// it before 4.2), no EXISTS, no string functions, no other sections. An
// expression has at most 4096 characters and 200 tokens, as in RabbitMQ,
// and at most 100 levels of NOTs and parentheses within one another.
//
// A message is seen as it goes on the wire (see package messages): an
// empty string property, a zero time, an empty user id and a zero group
// sequence are absent (NULL); Priority 0 is the default priority 4; times
// are milliseconds since the epoch; strings, symbols, binaries and UUIDs
// are alike byte strings, as they are to RabbitMQ.
package sqlfilter
