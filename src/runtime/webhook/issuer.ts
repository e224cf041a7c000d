// A child process that runs one certificate job (certificates.ts), read from stdin and answered on
// stdout, and exits: @peculiar/x509 and its ASN.1 libraries (some 14 MB resident) are needed when
// a webhook server starts or renews its certificate, so `berth run` itself never loads them.
import { text } from 'node:stream/consumers';
import { runCertificateJob, type CertificateJob } from './certificates.ts';

const job = JSON.parse(await text(process.stdin)) as CertificateJob;
process.stdout.write(JSON.stringify(await runCertificateJob(job)));
